// engine/localize/argument_check: the indices an op is given, read before it runs: an embedding's token
// ids, a loss's class indices (ignore_index respected), one_hot's classes; the rows holding
// them, the farthest value, the module that called the op.
#include "engine/localize/argument_check.h"

#include <gtest/gtest.h>
#include <torch/script.h>

using namespace batchcheck;

namespace {

torch::jit::Module module(const std::string& source, const std::vector<std::pair<std::string, at::Tensor>>& params = {}) {
  torch::jit::Module m(c10::QualifiedName("__torch__.test.Net"));
  m.register_attribute("training", c10::BoolType::get(), true);
  for (const auto& [name, t] : params) m.register_parameter(name, t, false);
  m.define(source);
  return m;
}

ArgumentRun run(torch::jit::Module& m, const std::vector<c10::IValue>& args, uint64_t batch) {
  ArgumentCheck check(torch::jit::toGraphFunction(m.get_method("forward").function()).graph());
  std::vector<c10::IValue> stack{m._ivalue()};
  stack.insert(stack.end(), args.begin(), args.end());
  return check.run(stack, batch);
}

}  // namespace

TEST(ArgumentCheck, EmbeddingIdsPastTheTable) {
  torch::jit::Module m = module("def forward(self, ids):\n    return torch.embedding(self.weight, ids)\n", {{"weight", at::zeros({10, 4})}});
  at::Tensor ids = at::tensor({1, 2, 3, 4, 5, 6, 12, 7}, at::kLong).reshape({4, 2});  // row 3 holds 12
  const ArgumentRun r = run(m, {ids}, 4);
  EXPECT_FALSE(r.result.ok);
  EXPECT_EQ(r.result.error, "index out of range in self");
  ASSERT_TRUE(r.fault.has_value());
  EXPECT_EQ(r.fault->site.op, "aten::embedding");
  EXPECT_EQ(r.fault->value, 12);
  EXPECT_EQ(r.fault->bound, 10);
  EXPECT_EQ(r.fault->rows, std::vector<uint64_t>{3});
  EXPECT_EQ(index_fault_text(*r.fault), "token id 12 >= num_embeddings 10 of aten::embedding");
  // Clean ids: it runs, and says nothing.
  const ArgumentRun clean = run(m, {at::zeros({4, 2}, at::kLong)}, 4);
  EXPECT_TRUE(clean.result.ok);
  EXPECT_FALSE(clean.fault.has_value());
}

TEST(ArgumentCheck, NegativeIdsAreOutOfBoundsToo) {
  torch::jit::Module m = module("def forward(self, ids):\n    return torch.embedding(self.weight, ids)\n", {{"weight", at::zeros({10, 4})}});
  const ArgumentRun r = run(m, {at::tensor({0, -3}, at::kLong)}, 2);
  ASSERT_TRUE(r.fault.has_value());
  EXPECT_EQ(r.fault->value, -3);
  EXPECT_EQ(r.fault->rows, std::vector<uint64_t>{1});
  EXPECT_EQ(index_fault_text(*r.fault), "token id -3 < 0 of aten::embedding");
}

TEST(ArgumentCheck, ClassIndicesOfALossInsideForwardKeepIgnoreIndex) {
  torch::jit::Module m = module(
      "def forward(self, x, y):\n    return torch.cross_entropy_loss(x, y, None, 1, 255, 0.0)\n");
  at::Tensor logits = at::zeros({4, 3});
  // Row 1's 255 is ignored; row 2's 5 is past the 3 classes.
  const ArgumentRun r = run(m, {logits, at::tensor({0, 255, 5, 2}, at::kLong)}, 4);
  EXPECT_FALSE(r.result.ok);
  ASSERT_TRUE(r.fault.has_value()) << r.result.error;
  EXPECT_EQ(r.fault->what, "class index");
  EXPECT_EQ(r.fault->value, 5);
  EXPECT_EQ(r.fault->bound, 3);
  EXPECT_EQ(r.fault->rows, std::vector<uint64_t>{2});
}

TEST(ArgumentCheck, OneHotPastItsClasses) {
  torch::jit::Module m = module("def forward(self, y):\n    return torch.one_hot(y, 4)\n");
  const ArgumentRun r = run(m, {at::tensor({0, 4, 1}, at::kLong)}, 3);
  ASSERT_TRUE(r.fault.has_value());
  EXPECT_EQ(r.fault->bound_name, "num_classes");
  EXPECT_EQ(r.fault->rows, std::vector<uint64_t>{1});
}

TEST(ArgumentCheck, FlattenedIndicesNameTheirRowThroughTheBatchsField) {
  torch::jit::Module m = module("def forward(self, ids):\n    return torch.embedding(self.weight, ids.flatten())\n",
                                {{"weight", at::zeros({10, 4})}});
  // ids [2, 2] flattened to [4]: id 30 at position 2 is row 1's.
  const ArgumentRun r = run(m, {at::tensor({1, 2, 30, 4}, at::kLong).reshape({2, 2})}, 2);
  ASSERT_TRUE(r.fault.has_value());
  EXPECT_EQ(r.fault->rows, std::vector<uint64_t>{1});
  EXPECT_EQ(r.fault->value, 30);
}

TEST(ArgumentCheck, SequenceFirstIndicesNameTheirRow) {
  torch::jit::Module m = module("def forward(self, ids):\n    return torch.embedding(self.weight, ids)\n",
                                {{"weight", at::zeros({10, 4})}});
  // [T, B] = [3, 2] from pad_sequence: id 30 at step 2 of sample 1.
  const ArgumentRun r = run(m, {at::tensor({1, 2, 3, 4, 5, 30}, at::kLong).reshape({3, 2})}, 2);
  ASSERT_TRUE(r.fault.has_value());
  EXPECT_EQ(r.fault->rows, std::vector<uint64_t>{1});
}

TEST(ArgumentCheck, TransposedThenFlattenedIndicesAreProvenByTheirValues) {
  torch::jit::Module m = module("def forward(self, ids):\n    return torch.embedding(self.weight, ids.t().flatten())\n",
                                {{"weight", at::zeros({10, 4})}});
  // ids.t().flatten() is [1, 30, 2, 4]: id 30 at position 1 is still row 1's.
  const ArgumentRun r = run(m, {at::tensor({1, 2, 30, 4}, at::kLong).reshape({2, 2})}, 2);
  ASSERT_TRUE(r.fault.has_value());
  EXPECT_EQ(r.fault->rows, std::vector<uint64_t>{1});
}

TEST(ArgumentCheck, IndicesNoFieldHoldsNameNoRows) {
  torch::jit::Module m = module("def forward(self, ids):\n    return torch.embedding(self.weight, ids.flatten() * 3)\n",
                                {{"weight", at::zeros({10, 4})}});
  // Made from the field, not a view of it: where each id came from is not proven.
  const ArgumentRun r = run(m, {at::tensor({1, 2, 10, 4}, at::kLong).reshape({2, 2})}, 2);
  ASSERT_TRUE(r.fault.has_value());
  EXPECT_TRUE(r.fault->rows.empty());  // the search names the samples then
  EXPECT_EQ(r.fault->value, 30);
}

// A training step (loss.type "step"): every loss op's arguments are checked where it runs; at one
// it would raise on (or on CUDA assert), forward stops before it.
TEST(ArgumentCheck, AStepStopsBeforeABceWhoseTargetLeavesItsRange) {
  torch::jit::Module m = module("def forward(self, x, y):\n    return torch.binary_cross_entropy(torch.sigmoid(x), y)\n");
  at::Tensor y = at::tensor({0.f, 1.f, 2.f, 1.f}).reshape({4, 1});
  ArgumentCheck check(torch::jit::toGraphFunction(m.get_method("forward").function()).graph());
  std::vector<OpFault> faults;
  bool stopped = false;
  std::vector<c10::IValue> stack{m._ivalue(), at::zeros({4, 1}), y};
  EXPECT_THROW(check.run_step(stack, 4, faults, stopped), std::exception);
  EXPECT_TRUE(stopped);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].id, "target-out-of-range");
  EXPECT_EQ(faults[0].loss, "BCELoss");
  EXPECT_EQ(faults[0].outside, 1u);
  EXPECT_EQ(faults[0].max, 2.0);
  EXPECT_EQ(faults[0].rows, std::vector<uint64_t>{2});
  EXPECT_TRUE(faults[0].fatal);
}

TEST(ArgumentCheck, AStepGoesOnPastALogitsTargetOutsideItsRangeAndSaysSo) {
  torch::jit::Module m = module("def forward(self, x, y):\n    return torch.binary_cross_entropy_with_logits(x, y)\n");
  ArgumentCheck check(torch::jit::toGraphFunction(m.get_method("forward").function()).graph());
  std::vector<OpFault> faults;
  bool stopped = true;
  c10::IValue out = check.run_step({m._ivalue(), at::zeros({3}), at::tensor({0.f, 255.f, 1.f})}, 3, faults, stopped);
  EXPECT_FALSE(stopped);
  EXPECT_TRUE(out.isTensor());
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].loss, "BCEWithLogitsLoss");
  EXPECT_FALSE(faults[0].fatal);  // PyTorch computes a loss from it, a wrong one
  EXPECT_EQ(faults[0].rows, std::vector<uint64_t>{1});
}

TEST(ArgumentCheck, AStepWhoseSqueezeAteTheBatchOfOneStopsAtTheShapes) {
  torch::jit::Module m = module("def forward(self, x, y):\n    return torch.binary_cross_entropy(torch.sigmoid(x).squeeze(), y)\n");
  ArgumentCheck check(torch::jit::toGraphFunction(m.get_method("forward").function()).graph());
  std::vector<OpFault> faults;
  bool stopped = false;
  EXPECT_THROW(check.run_step({m._ivalue(), at::zeros({1, 1}), at::zeros({1})}, 1, faults, stopped), std::exception);
  EXPECT_TRUE(stopped);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].id, "shape-mismatch");
  EXPECT_EQ(faults[0].input_shape, std::vector<int64_t>{});
  EXPECT_EQ(faults[0].target_shape, std::vector<int64_t>{1});
  // The batch of eight runs.
  faults.clear();
  check.run_step({m._ivalue(), at::zeros({8, 1}), at::zeros({8})}, 8, faults, stopped);
  EXPECT_FALSE(stopped);
  EXPECT_TRUE(faults.empty());
}
