#pragma once
// A forward in half precision watched op by op, through LibTorch's RecordFunction, so every
// runner is covered alike (a TorchScript forward, a user's traced step): the largest finite
// |value| any op's float16/bfloat16 output held, and the first op whose half-precision output
// went non-finite from finite arguments (an overflow, or a NaN the op made). One reduction per
// such op (on a GPU, and one copy of its two ends back); where in the model the op sits (module,
// line, samples) is the localizer's to say, on the batches that need it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace batchcheck {

// Whether an op's output holds whatever the memory held ("aten::empty_like", "aten::new_empty",
// "aten::resize_", "aten::resize_as_": dropout's mask before bernoulli_ fills it): a value no computation made, so
// neither a peak, an overflow nor where a NaN was born.
bool undefined_values(const std::string& op);

struct HalfWatchResult {
  double peak = 0;            // the largest finite |value| of a half-precision op output
  std::string nonfinite_op;   // the first op whose half output went non-finite from finite arguments; "" if none
};

// Watches the ops this thread runs while it lives, and leaves what it saw in `into` when it
// ends, whether forward returned or raised; `enabled` false: nothing is watched or written.
class HalfWatch {
 public:
  HalfWatch(bool enabled, HalfWatchResult& into);
  ~HalfWatch();
  HalfWatch(const HalfWatch&) = delete;
  HalfWatch& operator=(const HalfWatch&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchcheck
