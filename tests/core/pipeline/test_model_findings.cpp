// Findings about the model itself: weights and buffers that are NaN in the file, and the root
// cause they give to each batch's NaN.
#include <gtest/gtest.h>

#include "core/findings/fixes.h"
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

// One rare word's embedding row: the predictions that use it are NaN, not every one; the first
// fix resets those rows (the checkpoint and the clipping after it).
TEST(ModelFindings, APartlyNonfiniteParameterSaysHowMuchAndWhichRows) {
  ModelInfo m;
  m.nonfinite_parameters = {"emb.weight"};
  m.nonfinite_weights = {{"emb.weight", 16, 6400, {7}, 1, true}};
  auto f = model_nonfinite_finding(m, "the model given to batchcheck.scan()");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->message,
            "the model holds NaN or Inf in 1 parameter (emb.weight: 16 of 6400 values, in row 7) as loaded from the model "
            "given to batchcheck.scan(): a prediction is NaN where its sample holds one of those ids (an embedding's "
            "rows), the others are not");
  EXPECT_EQ(f->evidence["nonfinite_weights"][0]["rows"], nlohmann::ordered_json({7}));
  Geometry g = compute_geometry(LoaderSpec{});
  FixContext ctx;
  ctx.geometry = &g;
  attach_fixes(*f, ctx);
  ASSERT_EQ(f->fixes.size(), 3u);
  EXPECT_EQ(f->fixes[0].id, "reset-nonfinite-rows");
  EXPECT_EQ(f->fixes[0].code,
            "with torch.no_grad():\n    w = model.get_parameter(\"emb.weight\")\n    bad = ~torch.isfinite(w).flatten(1).all(1)\n"
            "    w[bad] = w[~bad].mean(0)");
  EXPECT_EQ(f->fixes[1].id, "earlier-checkpoint");
  // The whole parameter: every prediction, and no rows to reset.
  m.nonfinite_weights = {{"emb.weight", 6400, 6400, {0, 1, 2, 3, 4, 5, 6, 7}, 100, true}};
  f = model_nonfinite_finding(m, "m.pt");
  EXPECT_EQ(f->message, "the model holds NaN or Inf in 1 parameter (emb.weight: 6400 of 6400 values, in rows 0, 1, 2, 3, 4, 5, 6, 7 "
                        "and 92 more) as loaded from m.pt: every prediction computed with them is NaN, whatever the batch");
  attach_fixes(*f, ctx);
  EXPECT_EQ(f->fixes[0].id, "earlier-checkpoint");
  // One value of a linear layer's row: an output unit every sample goes through, so every
  // prediction after it.
  m.nonfinite_parameters = {"3.weight"};
  m.nonfinite_weights = {{"3.weight", 1, 24, {1}, 1, false}};
  f = model_nonfinite_finding(m, "m.pt");
  EXPECT_EQ(f->message, "the model holds NaN or Inf in 1 parameter (3.weight: 1 of 24 values, in row 1) as loaded from m.pt: "
                        "every prediction computed with them is NaN, whatever the batch");
  attach_fixes(*f, ctx);
  EXPECT_EQ(f->fixes[0].id, "earlier-checkpoint");
}
