#pragma once
// The arguments of the ops that take indices (an embedding's token ids, a loss's class
// indices, one_hot's classes), read as the forward of a TorchScript module reaches them: a copy
// of its graph, inlined, with a profiling node before each such op. The first op whose indices
// fall outside its bound is the cause a forward error (or CUDA's device-side assert) hides,
// with the rows of the batch that hold them. Engine-internal; the result is torch-free.
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <vector>

#include "core/pipeline/blame_stage.h"

namespace torch::jit {
struct Graph;
}

namespace batchcheck {

class ArgumentCheck {
 public:
  // `forward`: the module's forward graph (self first); copied, inlined and instrumented here.
  explicit ArgumentCheck(const std::shared_ptr<torch::jit::Graph>& forward);
  ~ArgumentCheck();
  ArgumentCheck(const ArgumentCheck&) = delete;
  ArgumentCheck& operator=(const ArgumentCheck&) = delete;

  // Runs the instrumented forward on [self, args...] (autograd off) with a batch of `batch`
  // rows: what it raised (ok where it ran), and the first index fault seen before that.
  ArgumentRun run(std::vector<c10::IValue> stack, uint64_t batch);

  // The user's training step (loss.type "step"), with autograd as the caller has it: every
  // loss op's arguments checked (BCE's input and target ranges too), each fault in `faults`;
  // at one the op would raise on (or, on CUDA, assert), forward stops before it (`stopped`) and
  // this throws what the scan reports as the batch's forward error. Returns forward's value.
  c10::IValue run_step(std::vector<c10::IValue> stack, uint64_t batch, std::vector<OpFault>& faults, bool& stopped);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchcheck
