// core/pipeline/op_faults: what the loss ops inside a user's step were given, as findings.
#include "core/pipeline/op_faults.h"

#include <gtest/gtest.h>

using namespace batchcheck;

namespace {

OpFault bce(const std::string& id, const std::string& what, const std::string& loss) {
  OpFault f;
  f.site = {"aten::binary_cross_entropy", "criterion", "train.py", 42, "return criterion(out, y)"};
  f.module_type = "BCELoss";
  f.id = id;
  f.what = what;
  f.loss = loss;
  f.outside = 2;
  f.elements = 64;
  f.min = 0;
  f.max = 255;
  f.rows = {3, 5};
  f.fatal = loss == "BCELoss";
  return f;
}

}  // namespace

TEST(OpFaults, ABceTargetOutsideItsRange) {
  const auto e = op_fault_findings({bce("target-out-of-range", "target", "BCELoss")}, 8);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].id, "target-out-of-range");
  EXPECT_EQ(e[0].stage, "target");
  EXPECT_EQ(e[0].rows, (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(e[0].message,
            "BCELoss's target holds 2 values outside [0, 1] (min 0, max 255) in 2 samples of a batch of 8, in your step's "
            "aten::binary_cross_entropy in criterion (BCELoss) at File \"train.py\", line 42: return criterion(out, y); training "
            "raises there (on CUDA: a device-side assert), so batchcheck stopped the step before it");
  EXPECT_EQ(e[0].cuda, "Assertion `target_val >= zero && target_val <= one` failed.");
  EXPECT_EQ(e[0].evidence["in_step"], true);
  EXPECT_EQ(e[0].evidence["location"], "File \"train.py\", line 42");
}

TEST(OpFaults, ALogitsTargetComputesAWrongLossWithoutAWord) {
  const auto e = op_fault_findings({bce("target-out-of-range", "target", "BCEWithLogitsLoss")}, 8);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].message.find("; BCEWithLogitsLoss computes a loss from it without a word, a wrong one"), std::string::npos)
      << e[0].message;
  EXPECT_EQ(e[0].cuda, "");
}

TEST(OpFaults, AClassIndexPastTheClassesAndAShapeMismatch) {
  OpFault c;
  c.site = {"aten::nll_loss_nd", "", "train.py", 7, ""};
  c.id = "target-out-of-range";
  c.what = "class index";
  c.bound_name = "classes";
  c.value = 10;
  c.bound = 10;
  c.rows = {1};
  OpFault s = bce("shape-mismatch", "input", "BCELoss");
  s.input_shape = {};
  s.target_shape = {1};
  const auto e = op_fault_findings({c, s}, 4);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].id, "target-out-of-range");
  EXPECT_EQ(e[0].message.rfind("class index 10 >= classes 10 of aten::nll_loss_nd in 1 sample of a batch of 4", 0), 0u) << e[0].message;
  EXPECT_EQ(e[0].cuda, "Assertion `t >= 0 && t < n_classes` failed.");
  EXPECT_EQ(e[1].id, "shape-mismatch");
  EXPECT_NE(e[1].message.find("PyTorch raises \"Using a target size (torch.Size([1])) that is different to the input size "
                              "(torch.Size([]))\" there"),
            std::string::npos)
      << e[1].message;
  EXPECT_EQ(e[1].rows.size(), 4u);
}

TEST(OpFaults, AFaultInsideAModelRunEagerlyIsForwardsNotAStepsOne) {
  OpFault c;
  c.site = {"aten::embedding", "tok", "gpt.py", 74, ""};
  c.module_type = "Embedding";
  c.id = "index";
  c.what = "token id";
  c.bound_name = "num_embeddings";
  c.value = 53;
  c.bound = 50;
  c.rows = {6};
  c.fatal = true;
  const auto e = op_fault_findings({c}, 8, false);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].id, "forward-error");
  EXPECT_EQ(e[0].message,
            "token id 53 >= num_embeddings 50 of tok (Embedding) in 1 sample of a batch of 8, in forward's aten::embedding in "
            "tok (Embedding) at File \"gpt.py\", line 74; training raises there (on CUDA: a device-side assert), so batchcheck "
            "stopped forward before it");
  EXPECT_EQ(e[0].evidence["index_fault"]["in_step"], false);
  EXPECT_EQ(e[0].rows, (std::vector<uint64_t>{6}));
}
