// Findings about the model itself: weights and buffers that are NaN in the file, and the root
// cause they give to each batch's NaN.
#include <gtest/gtest.h>

#include "core/pipeline/model_findings.h"

using namespace batchcheck;

TEST(ModelFindings, NonfiniteWeightsAndBuffersAreNamed) {
  ModelInfo m;
  EXPECT_FALSE(model_nonfinite_finding(m, "m.pt"));
  EXPECT_TRUE(model_root_cause(m, Mode::Train).is_null());

  m.nonfinite_parameters = {"layer3.0.conv1.weight", "layer3.0.bn1.weight", "fc.weight", "fc.bias"};
  auto f = model_nonfinite_finding(m, "m.pt");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->id, "model-nonfinite");
  EXPECT_EQ(f->severity, Severity::Error);
  EXPECT_EQ(f->message,
            "the model holds NaN or Inf in 4 parameters (layer3.0.conv1.weight, layer3.0.bn1.weight, fc.weight and 1 more) "
            "as loaded from m.pt: every prediction computed with them is NaN, whatever the batch");
  EXPECT_EQ(f->evidence["parameters"].size(), 4u);
  const auto cause = model_root_cause(m, Mode::Train);
  EXPECT_EQ(cause["kind"], "model");
  EXPECT_EQ(cause["parameters"].size(), 4u);

  // Only BatchNorm's running statistics: train mode normalizes with the batch's own, so the
  // training loss is not theirs to spoil; eval mode's predictions are.
  ModelInfo bn;
  bn.nonfinite_buffers = {"bn1.running_var"};
  f = model_nonfinite_finding(bn, "m.pt");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->message, "the model holds NaN or Inf in 1 buffer (bn1.running_var) as loaded from m.pt: batches normalized "
                        "with these statistics (eval mode) come out NaN");
  EXPECT_TRUE(model_root_cause(bn, Mode::Train).is_null());
  EXPECT_EQ(model_root_cause(bn, Mode::Eval)["summary"],
            "the model's own buffers hold NaN or Inf as loaded (bn1.running_var), not this batch: see model-nonfinite");
}
