#pragma once
// BatchNorm that an eval-mode trace froze (aten::batch_norm with a constant training=False):
// the archive normalizes with its running statistics whatever the batch, so a batch that gives
// BatchNorm one value per channel passes through it, while the user's eager model in train
// mode raises "Expected more than 1 value per channel when training" there. This runs the
// forward through a copy of the graph with a profiling node before each such op and says
// which saw one value per channel (batch x spatial positions = 1, PyTorch's own test).
// Engine-internal.
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <vector>

#include "core/pipeline/backend.h"

namespace torch::jit {
struct Graph;
struct Node;
}  // namespace torch::jit

namespace batchcheck {

// The training flag of aten::batch_norm or a dropout when tracing froze it to a constant; a
// scripted module computes it from self.training (nullopt, as for any other node).
struct FrozenFlag {
  bool batch_norm = false;  // else a dropout
  bool training = false;
};
std::optional<FrozenFlag> frozen_training_flag(const torch::jit::Node* n);

class FrozenBatchNormCheck {
 public:
  // `forward`: the module's forward graph (self first); copied, inlined and instrumented here.
  explicit FrozenBatchNormCheck(const std::shared_ptr<torch::jit::Graph>& forward);
  ~FrozenBatchNormCheck();
  FrozenBatchNormCheck(const FrozenBatchNormCheck&) = delete;
  FrozenBatchNormCheck& operator=(const FrozenBatchNormCheck&) = delete;

  // Runs the instrumented forward on [self, args...] (normalized as the method's schema wants)
  // and returns the frozen BatchNorm ops that saw one value per channel, in the order they ran.
  // Throws what the model raises.
  std::vector<BatchNormSite> run(std::vector<c10::IValue> stack);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchcheck
