// The forward, loss and backward stages' findings from fixed results: the exact messages a
// user reads, the evidence, and which failures lose the device.
#include <gtest/gtest.h>

#include "core/collate_stage.h"
#include "core/forward_stage.h"
#include "core/loss_stage.h"

using namespace batchcheck;

namespace {
ForwardResult raised(const std::string& error) {
  ForwardResult f;
  f.error = error;
  return f;
}
}  // namespace

TEST(ForwardStage, ClassifiesAndSaysWhatTheUserMustKnow) {
  ForwardFailureContext ctx;
  ctx.batch_size = 1;
  ctx.largest_ok_batch = 8;
  Emitted e = forward_failure(raised("shape '[8, -1]' is invalid for input of size 12"), ctx);
  EXPECT_EQ(e.id, "hardcoded-batch-size");
  EXPECT_EQ(e.stage, "forward");
  EXPECT_EQ(e.message, "forward runs at batch size 8 but fails at 1 with a shape error: shape '[8, -1]' is invalid for input of size 12");
  EXPECT_EQ(e.evidence["largest_ok_batch_size"], 8);
  EXPECT_EQ(e.rows, std::vector<uint64_t>{0});
  EXPECT_EQ(e.total, 1u);

  ctx.batchnorm_modules = {"bn1", "layer1.0.bn1"};
  e = forward_failure(raised("Expected more than 1 value per channel when training, got input size [1, 8]"), ctx);
  EXPECT_EQ(e.id, "batchnorm-single-value");
  EXPECT_EQ(e.message, "BatchNorm saw one value per channel in train mode on a batch of 1 sample: Expected more than 1 value "
                       "per channel when training, got input size [1, 8]");
  EXPECT_EQ(e.evidence["batchnorm_modules"], nlohmann::ordered_json::array({"bn1", "layer1.0.bn1"}));

  ctx = {};
  ctx.batch_size = 4;
  ctx.input_dtype = "float64";
  e = forward_failure(raised("expected scalar type Double but found Float"), ctx);
  EXPECT_EQ(e.evidence["cause"], "input-dtype");
  EXPECT_EQ(e.message, "the inputs are float64 but the model computes in float32; forward raised on a batch of 4 samples: "
                       "expected scalar type Double but found Float");
  EXPECT_FALSE(e.evidence.contains("largest_ok_batch_size")) << "no forward has succeeded yet";

  ForwardResult f = raised("index out of range in self");
  f.location = "model.py, line 7";
  e = forward_failure(f, ctx);
  EXPECT_EQ(e.id, "forward-error");
  EXPECT_EQ(e.message, "forward raised on a batch of 4 samples: index out of range in self");
  EXPECT_EQ(e.evidence["location"], "model.py, line 7");
  EXPECT_EQ(e.cuda, "Assertion `srcIndex < srcSelectDimSize` failed.");
  EXPECT_EQ(e.rows, (std::vector<uint64_t>{0, 1, 2, 3}));

  e = forward_failure(raised("CUDA error: device-side assert triggered"), ctx);
  EXPECT_EQ(e.id, "cuda-device-assert");
  EXPECT_NE(e.message.find("the device is unusable after it, so the scan stopped here"), std::string::npos) << e.message;
}

TEST(LossStage, NonFiniteLossSaysWhyWhenEveryTargetIsIgnored) {
  LossConfig cfg;
  cfg.type = LossType::CrossEntropy;
  cfg.ignore_index = 255;
  LossResult ok;
  ok.ok = true;
  ok.value = 0.5;
  EXPECT_FALSE(loss_finding(ok, cfg, 4, nullptr));

  LossResult nan = ok;
  nan.value = std::numeric_limits<double>::quiet_NaN();
  nan.nonfinite = 1;
  ValueStats all_ignored;
  all_ignored.elements = all_ignored.ignored = 16;
  auto e = loss_finding(nan, cfg, 4, &all_ignored);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, "loss-nonfinite");
  EXPECT_EQ(e->message, "cross_entropy loss is nan: every target equals ignore_index 255, and the mean over zero elements is NaN");
  EXPECT_EQ(e->evidence["loss"], "nan");
  EXPECT_EQ(e->evidence["nonfinite_elements"], 1);
  ValueStats some = all_ignored;
  some.ignored = 15;
  EXPECT_EQ(loss_finding(nan, cfg, 4, &some)->message, "cross_entropy loss is nan");
  cfg.reduction = Reduction::Sum;
  EXPECT_EQ(loss_finding(nan, cfg, 4, &all_ignored)->message, "cross_entropy loss is nan") << "a sum over nothing is 0, not NaN";

  LossResult err;
  err.error = "Target 7 is out of bounds.";
  e = loss_finding(err, cfg, 2, nullptr);
  EXPECT_EQ(e->id, "loss-error");
  EXPECT_EQ(e->message, "cross_entropy raised: Target 7 is out of bounds.");
  EXPECT_EQ(e->rows, (std::vector<uint64_t>{0, 1}));
}

TEST(LossStage, TheModelsOwnLossNamesItsNonFiniteTerms) {
  LossConfig cfg;
  cfg.type = LossType::Model;
  LossResult nan;
  nan.ok = true;
  nan.elements = nan.nonfinite = 1;
  nan.value = std::numeric_limits<double>::quiet_NaN();
  nan.nonfinite_terms = {"loss_box_reg", "loss_rpn_box_reg"};
  auto e = loss_finding(nan, cfg, 4, nullptr);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, "loss-nonfinite");
  EXPECT_EQ(e->message, "the loss forward returned is nan (not finite: loss_box_reg, loss_rpn_box_reg)");
  EXPECT_EQ(e->evidence["nonfinite_terms"], nlohmann::ordered_json::parse(R"(["loss_box_reg", "loss_rpn_box_reg"])"));
}

TEST(BackwardStage, NamesTheFirstParametersAndCountsTheRest) {
  BackwardResult b;
  b.ok = true;
  EXPECT_FALSE(backward_finding(b, 8));
  b.nonfinite = {{"fc1.weight", 64, 64, 0}, {"fc1.bias", 8, 0, 8}, {"fc2.weight", 8, 4, 4}, {"fc2.bias", 1, 1, 0}};
  b.nonfinite_total = 4;
  auto e = backward_finding(b, 8);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, "gradient-nonfinite");
  EXPECT_EQ(e->message, "loss.backward() on a batch of 8 samples gave non-finite gradients to 4 parameters: fc1.weight "
                        "(64 NaNs), fc1.bias (8 Infs), fc2.weight (4 NaNs, 4 Infs) and 1 more; one optimizer step would write "
                        "NaN/Inf into the weights");
  EXPECT_EQ(e->evidence["nonfinite_parameters"], 4);
  EXPECT_EQ(e->evidence["parameters"].size(), 4u);

  BackwardResult failed;
  failed.error = "one of the variables needed for gradient computation has been modified by an inplace operation";
  e = backward_finding(failed, 8);
  EXPECT_EQ(e->id, "backward-error");
  EXPECT_EQ(e->message, "loss.backward() raised on a batch of 8 samples (forward and loss succeeded): one of the variables "
                        "needed for gradient computation has been modified by an inplace operation");
  failed.error = "CUDA error: device-side assert triggered";
  EXPECT_EQ(backward_finding(failed, 8)->id, "cuda-device-assert");
}

TEST(CollateStage, NamesTheCollateTheFieldAndTheShapes) {
  CollateFailure f;
  f.field = "inputs";
  f.error = "stack expects each tensor to be equal size, but got [5] at entry 0 and [7] at entry 2";
  f.shapes = {{{5}, 2}, {{7}, 1}, {{5, 2}, 1}};
  f.rows = {0, 2, 3};
  Emitted e = collate_finding(f);
  EXPECT_EQ(e.id, "collate-error");
  EXPECT_EQ(e.stage, "collate");
  EXPECT_EQ(e.message,
            "default_collate cannot put this batch's inputs together: stack expects each tensor to be equal size, but got "
            "[5] at entry 0 and [7] at entry 2; the samples' shapes: [5] x2, [7], [5, 2]; the DataLoader raises this at "
            "this batch (samples of unequal size need a padding collate_fn)");
  EXPECT_EQ(e.rows, (std::vector<uint64_t>{0, 2, 3}));
  EXPECT_EQ(e.total, 3u);
  EXPECT_EQ(e.evidence["collate"], "default");
  EXPECT_EQ(e.evidence["sample_shapes"][1]["shape"], nlohmann::ordered_json::parse("[7]"));

  // A padded field that still fails: pad_sequence's own message, no advice to pad.
  f.padded = true;
  f.error = "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 1";
  f.shapes = {{{4, 2}, 1}, {{6, 3}, 1}};
  f.rows = {0, 1};
  Emitted p = collate_finding(f);
  EXPECT_EQ(p.message, "pad_sequence cannot put this batch's inputs together: The size of tensor a (2) must match the "
                       "size of tensor b (3) at non-singleton dimension 1; the samples' shapes: [4, 2], [6, 3]");
  EXPECT_EQ(p.evidence["collate"], "pad");
}
