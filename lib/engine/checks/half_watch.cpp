#include "engine/checks/half_watch.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <cmath>
#include <string>
#include <tuple>
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
  bool self_finite = true;  // an in-place op's tensor, before the op wrote it (add_: x += y)
};

bool is_half(const at::Tensor& t) {
  return t.defined() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16) && t.numel() > 0 &&
         t.layout() == at::kStrided;
}

bool finite(const at::Tensor& t) {
  return !(t.defined() && t.is_floating_point() && t.numel() > 0 && t.layout() == at::kStrided) ||
         at::isfinite(t).all().item<bool>();
}

// An in-place op (add_, mul_): its first argument is what it writes.
bool in_place(const at::RecordFunction& fn) {
  const char* name = fn.name();
  const std::size_t n = std::char_traits<char>::length(name);
  return n > 1 && name[n - 1] == '_' && name[n - 2] != '_';
}

// A scalar or tensor argument that is already NaN/Inf: the op's non-finite output is its
// argument's (masked_fill(x, mask, -inf)), not an overflow. An argument the op wrote into counts
// as it was before the op.
bool nonfinite_argument(const Args& args, const std::vector<c10::IValue>& outputs) {
  for (const c10::IValue& v : args.inputs) {
    if (v.isDouble() && !std::isfinite(v.toDouble())) return true;
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    bool written = false;
    for (const c10::IValue& o : outputs) written = written || (o.isTensor() && o.toTensor().is_same(t));
    if (written ? !args.self_finite : !finite(t)) return true;
  }
  return false;
}

// The largest |value| of a half tensor (NaN when it holds one, inf when it holds an Inf): one
// pass; on a GPU one copy back of both ends.
double largest(const at::Tensor& t) {
  at::Tensor lo, hi;
  try {
    std::tie(lo, hi) = at::aminmax(t);
  } catch (const std::exception&) {  // a dtype or device without aminmax
    std::tie(lo, hi) = at::aminmax(t.to(at::kFloat));
  }
  double a = 0, b = 0;
  if (t.is_cpu()) {
    a = lo.item<double>();
    b = hi.item<double>();
  } else {
    const at::Tensor both = at::stack({lo.to(at::kFloat), hi.to(at::kFloat)}).cpu();
    a = both[0].item<double>();
    b = both[1].item<double>();
  }
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  return std::max(std::fabs(a), std::fabs(b));
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  WatchState* s = t_state;
  if (!s || s->depth++ != 0) return nullptr;
  auto args = std::make_unique<Args>();
  for (const c10::IValue& v : fn.inputs()) args->inputs.push_back(v);
  if (in_place(fn) && !args->inputs.empty() && args->inputs.front().isTensor() && is_half(args->inputs.front().toTensor())) {
    at::DisableRecordFunctionGuard off;
    args->self_finite = finite(args->inputs.front().toTensor());
  }
  return args;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  WatchState* s = t_state;
  if (!s) return;
  if (--s->depth != 0 || !ctx || undefined_values(fn.name())) return;
  at::DisableRecordFunctionGuard off;  // the watch's own reductions are not the model's ops
  for (const c10::IValue& v : fn.outputs()) {
    if (!v.isTensor() || !is_half(v.toTensor())) continue;
    const double m = largest(v.toTensor().detach());
    if (std::isfinite(m)) {
      s->r.peak = std::max(s->r.peak, m);
    } else if (s->r.nonfinite_op.empty() && !nonfinite_argument(*static_cast<Args*>(ctx), fn.outputs())) {
      s->r.nonfinite_op = fn.name();
    }
  }
}

}  // namespace

bool undefined_values(const std::string& op) {
  return op.rfind("aten::empty", 0) == 0 || op.rfind("aten::new_empty", 0) == 0 || op == "aten::resize_" ||
         op == "aten::resize_as_";
}

struct HalfWatch::Impl {
  explicit Impl(HalfWatchResult& r) : into(r) {}
  WatchState state;
  std::optional<at::CallbackHandle> handle;
  WatchState* outer = nullptr;
  HalfWatchResult& into;
};

HalfWatch::HalfWatch(bool enabled, HalfWatchResult& into) : impl_(std::make_unique<Impl>(into)) {
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
  impl_->into = impl_->state.r;
}

}  // namespace batchcheck
