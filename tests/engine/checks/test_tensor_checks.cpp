// engine/checks/tensor_checks: what the backend reads from tensors. On the CPU it reads them where
// they lie (no copies, no dispatches); elsewhere (CUDA, half precision, strided memory) it goes
// through LibTorch's reductions. Both ways must give the same counts.
#include "engine/checks/tensor_checks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

using namespace batchcheck;

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using Params = std::vector<std::pair<std::string, at::Tensor>>;

at::Tensor with_grad(const at::Tensor& grad) {
  at::Tensor p = at::zeros(grad.sizes(), grad.options()).requires_grad_();
  p.mutable_grad() = grad;
  return p;
}

BackwardResult gradients_of(const Params& params) {
  BackwardResult r;
  check_gradients(params, r);
  return r;
}

std::string counts(const BackwardResult& r) {
  std::string s = std::to_string(r.nonfinite_total) + ":";
  for (const auto& g : r.nonfinite) {
    s += " " + g.name + "/" + std::to_string(g.elements) + "/" + std::to_string(g.nan) + "/" + std::to_string(g.inf);
  }
  return s;
}

}  // namespace

TEST(TensorChecks, AFittingTensorIsReadWhereItLies) {
  const at::Tensor f = at::arange(6, at::kFloat).view({2, 3});
  EXPECT_EQ(for_kernel(f).data_ptr(), f.data_ptr()) << "no copy of a contiguous float32 CPU tensor";
  const at::Tensor l = at::arange(6, at::kLong);
  EXPECT_EQ(for_kernel(l).data_ptr(), l.data_ptr());
  const at::Tensor k = for_kernel(f.t());
  EXPECT_TRUE(k.is_contiguous());
  EXPECT_TRUE(at::equal(k, f.t()));
  EXPECT_EQ(for_kernel(at::ones({2}, at::kHalf)).scalar_type(), at::kFloat);
  EXPECT_EQ(for_kernel(at::ones({2}, at::kInt)).scalar_type(), at::kLong);
  const ValueStats s = check_tensor(for_kernel(at::tensor({1.0f, kNan, kInf, 4.0f}).view({2, 2})), ValueRule{});
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 1u);
  EXPECT_EQ(s.bad_rows, (std::vector<uint64_t>{0, 1}));
}

TEST(TensorChecks, GradientCountsAreTheSameReadInPlaceOrReduced) {
  const at::Tensor a = at::tensor({1.0f, kNan, kInf, -kInf});
  const at::Tensor b = at::tensor({0.5, 2.0}, at::kDouble);
  const at::Tensor c = at::tensor({kNan, 1.0f, 2.0f, kNan}).view({2, 2});
  // In CPU memory, contiguous: every gradient read in place.
  const Params in_place{{"a", with_grad(a)}, {"b", with_grad(b)}, {"c", with_grad(c)}, {"no_grad", at::zeros({3})}};
  EXPECT_EQ(counts(gradients_of(in_place)), "2: a/4/1/2 c/4/2/0");
  // One strided gradient and one in bfloat16: all go through the norms, with the same counts.
  const Params reduced{{"a", with_grad(a)}, {"b", with_grad(b)}, {"c", with_grad(c.t())},
                       {"h", with_grad(at::tensor({kInf, 1.0f}).to(at::kBFloat16))}};
  EXPECT_FALSE(reduced[2].second.grad().is_contiguous());
  EXPECT_EQ(counts(gradients_of(reduced)), "3: a/4/1/2 c/4/2/0 h/2/0/1");
  // A finite gradient whose L1 norm overflows is not counted.
  const Params big{{"big", with_grad(at::full({4}, 3e38f))}, {"h", with_grad(at::ones({1}).to(at::kBFloat16))}};
  EXPECT_EQ(counts(gradients_of(big)), "0:");
  EXPECT_EQ(counts(gradients_of({{"big", with_grad(at::full({4}, 3e38f))}})), "0:");
}

TEST(TensorChecks, TheLossIsTheSameReadInPlaceOrCopied) {
  LossConfig none;
  none.type = LossType::Mse;
  none.reduction = Reduction::None;
  const c10::Device cpu(c10::kCPU);
  const at::Tensor out = at::tensor({1.0f, kNan, 2.0f}), tgt = at::zeros({3});
  const LossResult f = run_loss(out, tgt, none, cpu, false);
  ASSERT_TRUE(f.ok) << f.error;
  EXPECT_EQ(f.elements, 3u);
  EXPECT_EQ(f.nonfinite, 1u);
  EXPECT_TRUE(std::isnan(f.value)) << "the first non-finite element is the value";
  // In half precision the loss is copied to float64 first: the same result.
  const LossResult h = run_loss(out.to(at::kHalf), tgt.to(at::kHalf), none, cpu, false);
  ASSERT_TRUE(h.ok) << h.error;
  EXPECT_EQ(h.elements, 3u);
  EXPECT_EQ(h.nonfinite, 1u);
  LossConfig mean = none;
  mean.reduction = Reduction::Mean;
  const LossResult m = run_loss(at::tensor({1.0f, 3.0f}), at::zeros({2}), mean, cpu, false);
  EXPECT_EQ(m.elements, 1u);
  EXPECT_EQ(m.nonfinite, 0u);
  EXPECT_DOUBLE_EQ(m.value, 5.0);
  at::Tensor kept;
  const LossResult k = run_loss(at::tensor({1.0f, 3.0f}).requires_grad_(), at::zeros({2}), mean, cpu, false, &kept);
  EXPECT_DOUBLE_EQ(k.value, 5.0);
  EXPECT_TRUE(kept.requires_grad()) << "kept for backward()";
}

// A forward-only BCE runs in LibTorch's vectorized ops, not its scalar kernel: the same value
// within float rounding, on saturated predictions too (the -100 clamp), and LibTorch's own
// error for a prediction outside [0, 1].
TEST(TensorChecks, ForwardOnlyBceIsLibTorchsWithinRounding) {
  const c10::Device cpu(c10::kCPU);
  at::manual_seed(3);
  at::Tensor x = at::rand({8, 1, 16, 16});
  x.view(-1).index_put_({0}, 0.0f);
  x.view(-1).index_put_({1}, 1.0f);
  const at::Tensor y = at::rand({8, 1, 16, 16}).gt(0.5).to(at::kFloat);
  for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
    LossConfig bce;
    bce.type = LossType::Bce;
    bce.reduction = red;
    const LossResult fast = run_loss(x, y, bce, cpu, false);
    ASSERT_TRUE(fast.ok) << fast.error;
    const double ref =
        at::binary_cross_entropy(x, y, {}, red == Reduction::Mean ? at::Reduction::Mean : at::Reduction::Sum).item<double>();
    EXPECT_NEAR(fast.value, ref, 1e-6 * std::abs(ref));
    EXPECT_EQ(fast.nonfinite, 0u);
    // With autograd (a training-mode scan keeps the loss for backward) it is LibTorch's kernel.
    at::Tensor kept;
    const LossResult bwd = run_loss(x.clone().requires_grad_(), y, bce, cpu, false, &kept);
    EXPECT_NEAR(bwd.value, ref, 1e-6 * std::abs(ref));
    EXPECT_TRUE(kept.requires_grad());
  }
  LossConfig bce;
  bce.type = LossType::Bce;
  const LossResult bad = run_loss(at::tensor({0.5f, 1.5f}), at::tensor({0.0f, 1.0f}), bce, cpu, false);
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.error.find("between 0 and 1"), std::string::npos) << bad.error;
}
