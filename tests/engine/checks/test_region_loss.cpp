// engine/checks/region_loss: the standard forms of the region losses, on cases small enough to
// compute by hand, and the target formats giving the same loss for the same labels.
#include "engine/checks/region_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace batchcheck;

namespace {

LossConfig region(LossType t, TargetFormat f, Activation a) {
  LossConfig l;
  l.type = t;
  l.target_format = f;
  l.activation = a;
  return l;
}

double value(const at::Tensor& t) { return t.item<double>(); }

}  // namespace

TEST(RegionLoss, DiceOfAHalfEverywhereIsComputedByHand) {
  // sigmoid(0) = 0.5 on 4 pixels, 2 of them foreground: tp 1, fp 1, fn 1.
  at::Tensor out = at::zeros({1, 1, 2, 2});
  at::Tensor mask = at::tensor({1.f, 1.f, 0.f, 0.f}).reshape({1, 1, 2, 2});
  const double dice = value(region_loss(out, mask, region(LossType::Dice, TargetFormat::Mask, Activation::Sigmoid)));
  EXPECT_NEAR(dice, 1 - (2 + 1e-5) / (4 + 1e-5), 1e-6);
  const double jaccard = value(region_loss(out, mask, region(LossType::Jaccard, TargetFormat::Mask, Activation::Sigmoid)));
  EXPECT_NEAR(jaccard, 1 - (1 + 1e-5) / (3 + 1e-5), 1e-6);
  // smp's binary mode: the same mask without its channel.
  const double binary = value(region_loss(out, mask.squeeze(1), region(LossType::Dice, TargetFormat::Binary, Activation::Sigmoid)));
  EXPECT_DOUBLE_EQ(binary, dice);
}

TEST(RegionLoss, ClassIndicesAreTheirOneHotMask) {
  at::Tensor out = at::randn({2, 3, 4, 4});
  at::Tensor idx = at::randint(0, 3, {2, 4, 4}, at::kLong);
  at::Tensor onehot = at::one_hot(idx, 3).permute({0, 3, 1, 2}).to(at::kFloat);
  const double mask = value(region_loss(out, onehot, region(LossType::Dice, TargetFormat::Mask, Activation::Softmax)));
  const double classes = value(region_loss(out, idx, region(LossType::Dice, TargetFormat::Classes, Activation::Softmax)));
  const double index = value(region_loss(out, idx.unsqueeze(1).to(at::kFloat), region(LossType::Dice, TargetFormat::Index, Activation::Softmax)));
  EXPECT_NEAR(classes, mask, 1e-6);
  EXPECT_NEAR(index, mask, 1e-6);
  // dice_ce adds cross entropy of the logits.
  const double ce = value(at::cross_entropy_loss(out, idx));
  const double dice_ce = value(region_loss(out, idx.unsqueeze(1), region(LossType::DiceCe, TargetFormat::Index, Activation::Softmax)));
  EXPECT_NEAR(dice_ce, mask + ce, 1e-5);
}

TEST(RegionLoss, IgnoredPixelsAddNothing) {
  at::Tensor out = at::randn({1, 3, 2, 2});
  at::Tensor idx = at::tensor({0L, 1L, 2L, 255L}).reshape({1, 2, 2});
  LossConfig l = region(LossType::Dice, TargetFormat::Classes, Activation::Softmax);
  l.ignore_index = 255;
  l.ignore_index_given = true;
  at::Tensor a = region_loss(out, idx, l);
  // The ignored pixel's prediction may be anything.
  at::Tensor other = out.clone();
  other.index_put_({0, at::indexing::Slice(), 1, 1}, at::tensor({50.f, -50.f, 3.f}));
  EXPECT_NEAR(value(a), value(region_loss(other, idx, l)), 1e-6);
  EXPECT_TRUE(std::isfinite(value(a)));
}

TEST(RegionLoss, FocalOnLogitsAndOnProbabilities) {
  // z = 0, t = 1: log(2) * (1 - 1/2)^2.
  at::Tensor out = at::zeros({1, 1, 1, 1});
  at::Tensor t = at::ones({1, 1, 1, 1});
  EXPECT_NEAR(value(region_loss(out, t, region(LossType::Focal, TargetFormat::Mask, Activation::Sigmoid))), std::log(2.0) / 4, 1e-6);
  LossConfig probs = region(LossType::Focal, TargetFormat::Mask, Activation::None);
  probs.alpha = 0.25;
  EXPECT_NEAR(value(region_loss(at::full({1, 1, 1, 1}, 0.5), t, probs)), 0.25 * std::log(2.0) / 4, 1e-6);
}

TEST(RegionLoss, NaNPredictionsGiveANaNLossAndGradientsFlow) {
  at::Tensor out = at::zeros({2, 1, 2, 2}).requires_grad_();
  at::Tensor mask = at::ones({2, 1, 2, 2});
  at::Tensor l = region_loss(out, mask, region(LossType::Dice, TargetFormat::Mask, Activation::Sigmoid));
  l.backward();
  EXPECT_TRUE(out.grad().defined());
  EXPECT_LT(out.grad().max().item<float>(), 0.f);  // raising a foreground logit lowers the loss
  at::Tensor bad = at::zeros({2, 1, 2, 2});
  bad.index_put_({1, 0, 0, 0}, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(value(region_loss(bad, mask, region(LossType::Focal, TargetFormat::Mask, Activation::Sigmoid)))));
}
