#include "engine/checks/half_watch.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <cmath>
#include <vector>

namespace batchcheck {

namespace {

// RecordFunction takes plain function pointers: the watch's state is the thread's.
struct WatchState {
  HalfWatchResult r;
  int depth = 0;  // outermost ops only: linear, not the addmm inside it
};
thread_local WatchState* t_state = nullptr;

struct Args : at::ObserverContext {
  std::vector<c10::IValue> inputs;
};

bool is_half(const at::Tensor& t) {
  return t.defined() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) && t.numel() > 0 &&
         t.layout() == at::kStrided;
}

// A scalar or tensor argument that is already NaN/Inf: the op's non-finite output is its
// argument's (masked_fill(x, mask, -inf)), not an overflow.
bool nonfinite_argument(const std::vector<c10::IValue>& inputs) {
  for (const c10::IValue& v : inputs) {
    if (v.isDouble() && !std::isfinite(v.toDouble())) return true;
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && t.is_floating_point() && t.numel() > 0 && t.layout() == at::kStrided &&
          !at::isfinite(t).all().item<bool>()) {
        return true;
      }
    }
  }
  return false;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  WatchState* s = t_state;
  if (!s || s->depth++ != 0) return nullptr;
  auto args = std::make_unique<Args>();
  for (const c10::IValue& v : fn.inputs()) args->inputs.push_back(v);
  return args;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  WatchState* s = t_state;
  if (!s) return;
  if (--s->depth != 0 || !ctx) return;
  at::DisableRecordFunctionGuard off;  // the watch's own reductions are not the model's ops
  ++s->r.ops;
  for (const c10::IValue& v : fn.outputs()) {
    if (!v.isTensor() || !is_half(v.toTensor())) continue;
    const at::Tensor t = v.toTensor().detach();
    auto [lo, hi] = at::aminmax(t);
    const double a = lo.item<double>(), b = hi.item<double>();
    if (std::isfinite(a) && std::isfinite(b)) {
      const double m = std::max(std::fabs(a), std::fabs(b));
      if (m > s->r.peak) {
        s->r.peak = m;
        s->r.peak_op = fn.name();
      }
    } else if (s->r.nonfinite_op.empty() && !nonfinite_argument(static_cast<Args*>(ctx)->inputs)) {
      s->r.nonfinite_op = fn.name();
    }
  }
}

}  // namespace

struct HalfWatch::Impl {
  WatchState state;
  std::optional<at::CallbackHandle> handle;
  WatchState* outer = nullptr;
};

HalfWatch::HalfWatch(bool enabled) : impl_(std::make_unique<Impl>()) {
  if (!enabled) return;
  impl_->outer = t_state;
  t_state = &impl_->state;
  impl_->handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                                 .needsInputs(true)
                                                 .needsOutputs(true)
                                                 .scopes({at::RecordScope::FUNCTION}));
}

HalfWatch::~HalfWatch() {
  if (!impl_->handle) return;
  at::removeCallback(*impl_->handle);
  t_state = impl_->outer;
}

HalfWatchResult HalfWatch::result() const { return impl_->state.r; }

}  // namespace batchcheck
