#pragma once
// The forward of a TorchScript module run through an instrumented copy of its graph: every
// call inlined, a profiling node after each operation (If and Loop bodies included), so each
// value the model computes is seen as it is made. Says which operation first made a NaN or
// Inf (with the statistics of what it was given), or which last took the prediction out of
// the loss's range, with the module path and the original source line from the archive's
// debug records. Engine-internal; the result is torch-free (core/findings/root_cause.h).
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <vector>

#include "core/findings/root_cause.h"

namespace torch::jit {
struct Graph;
}

namespace batchcheck {

// Whether the inlined graph casts to `dtype` anywhere (aten::to / aten::_to_copy with that
// constant dtype, autocast's own casts): a graph that holds the casts of a torch.autocast.
bool graph_casts_to(const std::shared_ptr<torch::jit::Graph>& forward, at::ScalarType dtype);

class ForwardLocalizer {
 public:
  // `forward`: the module's forward graph (self first); copied, inlined and instrumented here.
  // `strip_half_casts`: a copy whose casts to float16/bfloat16 cast to float32 instead, the
  // float32 run of a graph that holds its casts (a step traced under its torch.autocast); its
  // ops line up one to one with the plain copy's, so a ValueKey of either reads the other.
  explicit ForwardLocalizer(const std::shared_ptr<torch::jit::Graph>& forward, bool strip_half_casts = false);
  ~ForwardLocalizer();
  ForwardLocalizer(const ForwardLocalizer&) = delete;
  ForwardLocalizer& operator=(const ForwardLocalizer&) = delete;

  // Runs the instrumented forward on [self, args...] (normalized as the method's schema
  // wants) and returns what forward returned. Throws what the model raises, unless it raised
  // after the non-finite value asked about was seen (then None).
  c10::IValue run(std::vector<c10::IValue> stack, const LocalizeRequest& req);
  // What the last run found; `prediction`: the prediction selected from forward's value
  // (for a range request; undefined otherwise).
  Localization result(const at::Tensor& prediction, const LocalizeRequest& req) const;

  // Half precision. Where a value sits in a run: the instrumented op, which of its outputs,
  // and which of its executions (a loop's body runs many times).
  struct ValueKey {
    std::size_t site = 0, out = 0;
    uint64_t visit = 0;
  };
  // After a nonfinite run: the ops whose float16/bfloat16 output went non-finite from finite
  // arguments, in the order they ran (at most 8), each placed. After a peak run: the op whose
  // half-precision output held the largest finite |value|.
  const std::vector<std::pair<ValueKey, Localization>>& half_candidates() const;
  std::optional<std::pair<ValueKey, Localization>> peak() const;
  // Runs again (a float32 run: autocast off, or the copy with the casts taken out) and returns
  // the largest |value| of each value at `keys`, nullopt where not finite or not reached.
  std::vector<std::optional<double>> values_at(std::vector<c10::IValue> stack, const std::vector<ValueKey>& keys);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchcheck
