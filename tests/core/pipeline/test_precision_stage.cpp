// core/pipeline/precision_stage: a half-precision batch's HalfCheck as findings.
#include "core/pipeline/precision_stage.h"

#include <gtest/gtest.h>

using namespace batchcheck;

namespace {

Localization at_fc1() {
  Localization l;
  l.origin = "op";
  l.site = {"aten::linear", "fc1", "/src/model.py", 7, "h = torch.relu(self.fc1(x))"};
  l.dtype = "float16";
  l.origin_rows = {5};
  return l;
}

}  // namespace

TEST(PrecisionStage, AnOverflowNamesTheOpTheFloat32ValueAndTheSample) {
  HalfCheck h;
  h.ran = true;
  h.dtype = "float16";
  Localization l = at_fc1();
  l.fp32_max = 77382.82;
  l.output.nan = 56;
  l.output.pos_inf = 8;
  h.overflow = l;
  const std::vector<Emitted> e = half_findings(h, 32, 0.5);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].id, "half-overflow");
  EXPECT_EQ(e[0].rows, (std::vector<uint64_t>{5}));
  EXPECT_EQ(e[0].message,
            "float16 overflow in aten::linear at model.py:7 in fc1: in float32 this op gives 77,383 > 65,504, float16's largest "
            "value; in float16 it gives 56 NaNs and 8 Infs in 1 sample of a batch of 32, and from there the predictions and "
            "the loss go NaN/inf (in training: a skipped step with a GradScaler, NaN weights without one). A GradScaler does "
            "not help: it scales the gradients, not forward's values");
  EXPECT_EQ(e[0].evidence["fp32_max"].get<double>(), 77382.82);
  EXPECT_EQ(e[0].evidence["op"]["module"], "fc1");
}

TEST(PrecisionStage, TheHeadroomWarnsAtItsShareOnlyInFloat16) {
  HalfCheck h;
  h.ran = true;
  h.dtype = "float16";
  Localization l = at_fc1();
  l.peak = 39302.4;  // 60%
  h.peak_site = l;
  std::vector<Emitted> e = half_findings(h, 16, 0.5);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].id, "half-headroom");
  EXPECT_EQ(e[0].message,
            "float16 headroom: aten::linear at model.py:7 in fc1 gave 39,302, 60% of float16's largest value 65,504 (the "
            "warning is at 50%), in 1 sample of a batch of 16; inputs 1.67x as large overflow here (half-overflow): the next "
            "epochs' augmentations or a drift in the weights will");
  EXPECT_TRUE(half_findings(h, 16, 0.7).empty());  // above the peak: no warning
  h.dtype = "bfloat16";                            // float32's range
  EXPECT_TRUE(half_findings(h, 16, 0.5).empty());
  h.ran = false;
  h.overflow = at_fc1();
  EXPECT_TRUE(half_findings(h, 16, 0.5).empty());
}

TEST(PrecisionStage, BceUnderAutocastIsAnErrorOnlyInHalfPrecision) {
  Config cfg;
  cfg.loss.type = LossType::Bce;
  EXPECT_FALSE(bce_autocast_finding(cfg, 8));
  cfg.precision.dtype = Precision::Bf16;
  auto e = bce_autocast_finding(cfg, 8);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, "bce-autocast-unsafe");
  EXPECT_EQ(e->rows.size(), 8u);
  cfg.loss.type = LossType::BceWithLogits;  // the fix: safe under autocast
  EXPECT_FALSE(bce_autocast_finding(cfg, 8));
}
