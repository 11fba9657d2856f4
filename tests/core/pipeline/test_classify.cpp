// Forward-error classification and the value stage's findings, without a model.
#include <gtest/gtest.h>

#include "core/pipeline/classify.h"
#include "core/pipeline/value_findings.h"

using namespace batchcheck;

TEST(Classify, ForwardErrors) {
  EXPECT_EQ(classify_forward_error("Expected more than 1 value per channel when training, got input size [1, 8]", 1, 8),
            "batchnorm-single-value");
  EXPECT_EQ(classify_forward_error("shape '[8, -1]' is invalid for input of size 12", 1, 8), "hardcoded-batch-size");
  EXPECT_EQ(classify_forward_error("shape '[8, -1]' is invalid for input of size 12", 8, 0), "forward-error")
      << "no smaller batch ever worked: not a baked-in batch size";
  EXPECT_EQ(classify_forward_error("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", 8, 8),
            "cuda-device-assert");  // before any shape rule: the context is gone
  EXPECT_TRUE(is_device_assert("CUDA error: device-side assert triggered"));
  EXPECT_FALSE(is_device_assert("CUDA error: out of memory"));
  EXPECT_EQ(classify_forward_error("index out of range in self", 4, 8), "forward-error");
  EXPECT_TRUE(is_dtype_mismatch_error("expected scalar type Double but found Float"));
  EXPECT_FALSE(is_dtype_mismatch_error("index out of range in self"));
  EXPECT_EQ(cuda_equivalent_of_forward_error("index out of range in self"), "Assertion `srcIndex < srcSelectDimSize` failed.");
  EXPECT_EQ(cuda_equivalent_of_forward_error("something else"), "");
  EXPECT_EQ(cuda_equivalent_of_forward_error("Target 7 is out of bounds."), "Assertion `t >= 0 && t < n_classes` failed.");
}

namespace {

// A view whose every check returns fixed statistics.
class FixedView : public BatchView {
 public:
  explicit FixedView(ValueStats s) : s_(std::move(s)) {}
  ValueStats check(Slot, const ValueRule&) override { return s_; }
  LossResult loss(const LossConfig&) override { return {}; }

 private:
  ValueStats s_;
};

}  // namespace

TEST(ValueFindings, NanPredictionsUnderBceNameTheCudaAssert) {
  ValueStats s;
  s.elements = 8;
  s.nan = 4;
  s.bad_rows = {1};
  s.bad_rows_total = 1;
  FixedView view(s);
  ValueRule rule;
  rule.lo = 0;
  rule.hi = 1;
  TensorMeta meta{true, {2, 4}, "float32", true};
  LossConfig loss;
  loss.type = LossType::Bce;
  auto out = value_findings(Slot::Output, rule, meta, view, s, loss, 2, true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, "output-nonfinite");
  EXPECT_EQ(out[0].message,
            "predictions hold 4 NaNs in 1 sample of a batch of 2; NaN fails BCELoss's range check like an out-of-range value");
  EXPECT_EQ(out[0].cuda, cuda_text::kBceInput);
  EXPECT_EQ(out[0].rows, (std::vector<uint64_t>{1}));
  // A prediction whose rows are not the batch's: the finding concerns the whole batch.
  auto whole = value_findings(Slot::Output, rule, meta, view, s, loss, 2, false);
  EXPECT_EQ(whole[0].rows, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(whole[0].total, 2u);
}
