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

class ForwardLocalizer {
 public:
  // `forward`: the module's forward graph (self first); copied, inlined and instrumented here.
  explicit ForwardLocalizer(const std::shared_ptr<torch::jit::Graph>& forward);
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchcheck
