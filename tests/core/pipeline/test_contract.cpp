#include <gtest/gtest.h>

#include "core/pipeline/contract.h"

using namespace batchcheck;

namespace {
TensorMeta meta(std::vector<int64_t> shape, std::string dtype) {
  TensorMeta m;
  m.present = true;
  m.shape = std::move(shape);
  m.floating = dtype.rfind("float", 0) == 0;
  m.dtype = std::move(dtype);
  return m;
}
LossConfig loss(LossType t) {
  LossConfig l;
  l.type = t;
  return l;
}
std::vector<std::string> ids(const ContractPlan& p) {
  std::vector<std::string> out;
  for (const auto& i : p.issues) out.push_back(i.id);
  return out;
}
}  // namespace

TEST(Contract, BceWantsEqualShapesAndUnitRanges) {
  auto p = plan_contract(loss(LossType::Bce), {}, 8, meta({8, 1}, "float32"), meta({8, 1}, "float32"));
  EXPECT_TRUE(p.issues.empty());
  EXPECT_TRUE(p.can_compute_loss);
  EXPECT_EQ(p.output_rule->lo, 0.0);
  EXPECT_EQ(p.output_rule->hi, 1.0);
  EXPECT_EQ(p.target_rule->hi, 1.0);
}

TEST(Contract, SqueezedBatchOfOne) {
  auto p = plan_contract(loss(LossType::BceWithLogits), {}, 1, meta({}, "float32"), meta({1}, "float32"));
  EXPECT_EQ(ids(p), std::vector<std::string>{"batch-dim-mismatch"});
  EXPECT_EQ(p.issues[0].message,
            "the prediction is a 0-d tensor for a batch of 1 sample: the batch dimension is gone (a .squeeze() without a dim?)");
  EXPECT_FALSE(p.can_compute_loss);
}

TEST(Contract, CrossEntropyClassIndices) {
  auto p = plan_contract(loss(LossType::CrossEntropy), {}, 4, meta({4, 10, 8, 8}, "float32"), meta({4, 8, 8}, "int64"));
  EXPECT_TRUE(p.issues.empty());
  EXPECT_TRUE(p.class_targets);
  EXPECT_TRUE(p.target_rule->class_index);
  EXPECT_EQ(p.target_rule->classes, 10);
  EXPECT_EQ(p.target_rule->ignore_index, -100);
  // A channel dimension left on the mask is a shape error.
  auto bad = plan_contract(loss(LossType::CrossEntropy), {}, 4, meta({4, 10, 8, 8}, "float32"), meta({4, 1, 8, 8}, "int64"));
  EXPECT_EQ(ids(bad), std::vector<std::string>{"shape-mismatch"});
  EXPECT_EQ(bad.issues[0].message, "class-index targets must have shape [4, 8, 8] for predictions [4, 10, 8, 8], got [4, 1, 8, 8]");
}

TEST(Contract, CrossEntropyProbabilitiesAndDtypes) {
  auto probs = plan_contract(loss(LossType::CrossEntropy), {}, 4, meta({4, 3}, "float32"), meta({4, 3}, "float32"));
  EXPECT_TRUE(probs.issues.empty());
  EXPECT_FALSE(probs.class_targets);
  auto int32 = plan_contract(loss(LossType::CrossEntropy), {}, 4, meta({4, 3}, "float32"), meta({4}, "int32"));
  EXPECT_EQ(ids(int32), std::vector<std::string>{"target-dtype"});
  EXPECT_EQ(int32.issues[0].message, "class-index targets must be int64, got int32 (PyTorch: expected scalar type Long but found Int)");
  auto nll_float = plan_contract(loss(LossType::Nll), {}, 4, meta({4, 3}, "float32"), meta({4, 3}, "float32"));
  EXPECT_EQ(ids(nll_float), std::vector<std::string>{"target-dtype"});
  auto u8 = plan_contract(loss(LossType::CrossEntropy), {}, 4, meta({4, 3}, "float32"), meta({4}, "uint8"));
  ASSERT_EQ(ids(u8), std::vector<std::string>{"target-dtype"}) << "uint8 masks: expected scalar type Long but found Byte";
  EXPECT_EQ(u8.issues[0].message, "class-index targets must be int64, got uint8 (PyTorch: expected scalar type Long but found Byte)");
}

TEST(Contract, BceDtypes) {
  auto l = plan_contract(loss(LossType::Bce), {}, 4, meta({4}, "float32"), meta({4}, "int64"));
  EXPECT_EQ(l.issues[0].message, "BCE targets must be floating point, got int64 (PyTorch: Found dtype Long but expected Float)");
  auto d = plan_contract(loss(LossType::Bce), {}, 4, meta({4}, "float32"), meta({4}, "float64"));
  EXPECT_EQ(ids(d), std::vector<std::string>{"target-dtype"});
  auto logits = plan_contract(loss(LossType::BceWithLogits), {}, 4, meta({4}, "float32"), meta({4}, "float64"));
  EXPECT_TRUE(logits.issues.empty()) << "BCEWithLogitsLoss promotes float64 targets";
}

TEST(Contract, MseBroadcastIsAShapeMismatch) {
  auto p = plan_contract(loss(LossType::Mse), {}, 4, meta({4, 1}, "float32"), meta({4}, "float32"));
  EXPECT_EQ(ids(p), std::vector<std::string>{"shape-mismatch"});
}

TEST(Contract, ChecksIntersectWithTheLoss) {
  ChecksConfig c;
  c.output_range = Range{0.1, 2.0};
  auto p = plan_contract(loss(LossType::Bce), c, 4, meta({4}, "float32"), meta({4}, "float32"));
  EXPECT_EQ(p.output_rule->lo, 0.1);
  EXPECT_EQ(p.output_rule->hi, 1.0);
  auto none = plan_contract(loss(LossType::None), {}, 4, meta({4}, "float32"), meta({4}, "float32"));
  EXPECT_FALSE(none.output_rule);
  EXPECT_FALSE(none.target_rule);
  EXPECT_FALSE(none.can_compute_loss);
}

TEST(Contract, NllWantsLogProbabilities) {
  auto p = plan_contract(loss(LossType::Nll), {}, 4, meta({4, 3}, "float32"), meta({4}, "int64"));
  EXPECT_FALSE(p.output_rule->lo);
  EXPECT_EQ(p.output_rule->hi, 0.0);
}

TEST(Contract, TheModelsOwnLossHasNoPredictionContract) {
  LossConfig loss;
  loss.type = LossType::Model;
  TensorMeta scalar;
  scalar.present = true;
  scalar.dtype = "float32";
  scalar.floating = true;
  ContractPlan plan = plan_contract(loss, ChecksConfig{}, 4, scalar, TensorMeta{});
  EXPECT_TRUE(plan.issues.empty());  // a 0-d loss for a batch of 4 is no missing batch dimension
  EXPECT_FALSE(plan.output_rule);
  EXPECT_FALSE(plan.target_rule);
  EXPECT_TRUE(plan.can_compute_loss);
}

namespace {
LossConfig region(LossType t, TargetFormat f, Activation a = Activation::Sigmoid) {
  LossConfig l = loss(t);
  l.target_format = f;
  l.activation = a;
  return l;
}
}  // namespace

TEST(RegionContract, MaskWantsThePredictionsShapeAndUnitValues) {
  auto p = plan_contract(region(LossType::Dice, TargetFormat::Mask), {}, 4, meta({4, 1, 8, 8}, "float32"), meta({4, 1, 8, 8}, "uint8"));
  EXPECT_TRUE(p.issues.empty());
  EXPECT_TRUE(p.can_compute_loss);
  EXPECT_EQ(p.target_rule->lo, 0.0);
  EXPECT_EQ(p.target_rule->hi, 1.0);
  EXPECT_FALSE(p.target_rule->finite);  // an integer mask holds no NaN
  EXPECT_FALSE(p.target_rule->ignore_index);
  EXPECT_FALSE(p.output_rule->lo);      // sigmoid: logits, any finite value
  auto bad = plan_contract(region(LossType::Dice, TargetFormat::Mask), {}, 4, meta({4, 1, 8, 8}, "float32"), meta({4, 8, 8}, "float32"));
  EXPECT_EQ(ids(bad), std::vector<std::string>{"shape-mismatch"});
  EXPECT_EQ(bad.issues[0].message,
            "dice with target_format \"mask\" needs the target in the prediction's shape [4, 1, 8, 8], got [4, 8, 8] (MONAI: ground "
            "truth has different shape (torch.Size([4, 8, 8])) from input (torch.Size([4, 1, 8, 8])); class indices want \"index\" or "
            "\"classes\")");
  EXPECT_FALSE(bad.can_compute_loss);
}

TEST(RegionContract, WithoutActivationThePredictionIsAProbability) {
  auto p = plan_contract(region(LossType::Jaccard, TargetFormat::Mask, Activation::None), {}, 2, meta({2, 3, 4, 4}, "float32"),
                         meta({2, 3, 4, 4}, "float32"));
  EXPECT_EQ(p.output_rule->lo, 0.0);
  EXPECT_EQ(p.output_rule->hi, 1.0);
}

TEST(RegionContract, BinaryTakesTheTargetWithOrWithoutItsChannel) {
  for (std::vector<int64_t> t : {std::vector<int64_t>{4, 1, 8, 8}, std::vector<int64_t>{4, 8, 8}}) {
    auto p = plan_contract(region(LossType::Focal, TargetFormat::Binary), {}, 4, meta({4, 1, 8, 8}, "float32"), meta(t, "float32"));
    EXPECT_TRUE(p.issues.empty()) << shape_text(t);
  }
  auto many = plan_contract(region(LossType::Dice, TargetFormat::Binary), {}, 4, meta({4, 3, 8, 8}, "float32"), meta({4, 8, 8}, "float32"));
  ASSERT_EQ(ids(many), std::vector<std::string>{"shape-mismatch"});
  EXPECT_EQ(many.issues[0].message,
            "dice with target_format \"binary\" needs a prediction of one channel, got 3 in [4, 3, 8, 8] (several classes want "
            "\"mask\", \"index\" or \"classes\")");
}

TEST(RegionContract, IndexIsMonaisChannelOfOne) {
  LossConfig l = region(LossType::DiceCe, TargetFormat::Index, Activation::Softmax);
  auto p = plan_contract(l, {}, 2, meta({2, 4, 8, 8}, "float32"), meta({2, 1, 8, 8}, "float32"));
  EXPECT_TRUE(p.issues.empty());
  EXPECT_TRUE(p.class_targets);
  EXPECT_TRUE(p.target_rule->class_index);
  EXPECT_EQ(p.target_rule->classes, 4);
  EXPECT_EQ(p.target_rule->hi, 3.0);  // float indices are checked by value as well
  auto flat = plan_contract(l, {}, 2, meta({2, 4, 8, 8}, "float32"), meta({2, 8, 8}, "int64"));
  ASSERT_EQ(ids(flat), std::vector<std::string>{"shape-mismatch"});
  EXPECT_EQ(flat.issues[0].message,
            "dice_ce with target_format \"index\" needs class indices of shape [2, 1, 8, 8] for predictions [2, 4, 8, 8], got [2, 8, "
            "8] (the channel of one is missing: target.unsqueeze(1), or \"classes\")");
  auto onehot = plan_contract(l, {}, 2, meta({2, 4, 8, 8}, "float32"), meta({2, 4, 8, 8}, "float32"));
  ASSERT_EQ(ids(onehot), std::vector<std::string>{"shape-mismatch"});
  EXPECT_NE(onehot.issues[0].message.find("(MONAI: labels should have a channel with length equal to one)"), std::string::npos);
  // One channel: MONAI ignores to_onehot_y, and the target is a mask.
  auto one = plan_contract(l, {}, 2, meta({2, 1, 8, 8}, "float32"), meta({2, 1, 8, 8}, "float32"));
  EXPECT_FALSE(one.target_rule->class_index);
  EXPECT_EQ(one.target_rule->hi, 1.0);
}

TEST(RegionContract, ClassesAreSmpsMulticlass) {
  LossConfig l = region(LossType::Dice, TargetFormat::Classes, Activation::Softmax);
  auto p = plan_contract(l, {}, 2, meta({2, 5, 8, 8}, "float32"), meta({2, 8, 8}, "int64"));
  EXPECT_TRUE(p.issues.empty());
  EXPECT_EQ(p.target_rule->classes, 5);
  EXPECT_FALSE(p.target_rule->ignore_index);
  // F.one_hot takes int64 only.
  auto u8 = plan_contract(l, {}, 2, meta({2, 5, 8, 8}, "float32"), meta({2, 8, 8}, "uint8"));
  ASSERT_EQ(ids(u8), std::vector<std::string>{"target-dtype"});
  EXPECT_EQ(u8.issues[0].message,
            "dice one-hot encodes class indices with F.one_hot, which needs int64, got uint8 (PyTorch: one_hot is only applicable "
            "to index tensor of type LongTensor)");
  // With an ignore_index smp converts first; focal compares without one-hot.
  l.ignore_index = 255;
  l.ignore_index_given = true;
  auto ignored = plan_contract(l, {}, 2, meta({2, 5, 8, 8}, "float32"), meta({2, 8, 8}, "uint8"));
  EXPECT_TRUE(ignored.issues.empty());
  EXPECT_EQ(ignored.target_rule->ignore_index, 255);
  auto focal = plan_contract(region(LossType::Focal, TargetFormat::Classes), {}, 2, meta({2, 5, 8, 8}, "float32"), meta({2, 8, 8}, "uint8"));
  EXPECT_TRUE(focal.issues.empty());
  auto floats = plan_contract(l, {}, 2, meta({2, 5, 8, 8}, "float32"), meta({2, 8, 8}, "float32"));
  EXPECT_EQ(ids(floats), std::vector<std::string>{"target-dtype"});
}

TEST(RegionContract, PredictionsNeedAChannel) {
  auto p = plan_contract(region(LossType::Dice, TargetFormat::Mask), {}, 4, meta({4}, "float32"), meta({4}, "float32"));
  ASSERT_EQ(ids(p), std::vector<std::string>{"shape-mismatch"});
  EXPECT_EQ(p.issues[0].message, "dice needs predictions of shape (N, C, ...) with a channel dimension; got [4]");
}
