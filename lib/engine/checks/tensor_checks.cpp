// What the backend reads from tensors: the check kernel's view of them, a field's values,
// the loss and its finiteness, the gradients' non-finite counts. On the CPU they are read
// where they lie: on small batches a LibTorch dispatch costs more than the check itself.
#include "engine/checks/tensor_checks.h"

#include <ATen/core/grad_mode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>

#include "core/base/errors.h"
#include "engine/checks/region_loss.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

// What the check kernel reads where it lies: no dispatch at all, which on small batches costs
// more than the check.
bool kernel_ready(const at::Tensor& t) {
  const at::ScalarType st = t.scalar_type();
  return (st == at::kFloat || st == at::kDouble || st == at::kLong) && t.layout() == at::kStrided && t.is_cpu() &&
         t.is_contiguous();
}

}  // namespace

at::Tensor for_kernel(at::Tensor t) {
  if (kernel_ready(t)) return t;  // the common case
  const at::ScalarType st = t.scalar_type();
  if (st == at::kHalf || st == at::kBFloat16) t = t.to(at::kFloat);
  else if (!at::isFloatingType(st) && st != at::kLong) t = t.to(at::kLong);
  return t.to(at::kCPU).contiguous();
}

ValueStats check_tensor(const at::Tensor& t, const ValueRule& rule) {
  const uint64_t rows = t.dim() == 0 ? 1 : static_cast<uint64_t>(t.size(0));
  const uint64_t per_row = rows ? static_cast<uint64_t>(t.numel()) / rows : 0;
  switch (t.scalar_type()) {
    case at::kFloat: return check_values(t.data_ptr<float>(), rows, per_row, rule);
    case at::kDouble: return check_values(t.data_ptr<double>(), rows, per_row, rule);
    case at::kLong: return check_values(t.data_ptr<int64_t>(), rows, per_row, rule);
    default: throw InternalError("check: unexpected dtype " + dtype_name(t.scalar_type()));
  }
}

namespace {

// binary_cross_entropy without autograd on the CPU, in LibTorch's vectorized ops: its own CPU
// kernel calls scalar log and log1p per element, which on a forward-only scan of 64x64 masks
// cost more than the forward. The same formula, -(y * max(log x, -100) + (1 - y) * max(log1p(-x),
// -100)), equal to LibTorch's within float rounding. Not for gradients (LibTorch's backward
// clamps differently) or weights; an undefined tensor when it does not apply.
at::Tensor fast_bce(const at::Tensor& x, const at::Tensor& y, const LossConfig& loss) {
  if (at::GradMode::is_enabled() || !loss.weight.empty() || loss.reduction == Reduction::None || !x.is_cpu() ||
      !y.is_cpu() || !at::isFloatingType(x.scalar_type()) || x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes()) {
    return {};
  }
  at::Tensor a = at::log(x).clamp_min_(-100);
  at::Tensor b = at::log1p(at::neg(x)).clamp_min_(-100);
  b.add_(y * (a - b));  // y * a + (1 - y) * b
  return loss.reduction == Reduction::Mean ? b.mean().neg_() : b.sum().neg_();
}

at::Tensor compute_loss(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss) {
  int64_t red = loss.reduction == Reduction::Mean  ? at::Reduction::Mean
                : loss.reduction == Reduction::Sum ? at::Reduction::Sum
                                                   : at::Reduction::None;
  auto opts = at::TensorOptions().dtype(out.scalar_type()).device(out.device());
  c10::optional<at::Tensor> weight;
  if (!loss.weight.empty()) weight = at::tensor(loss.weight, at::kDouble).to(opts);
  switch (loss.type) {
    case LossType::Bce: {
      // A prediction outside [0, 1] (or NaN) makes the fast form non-finite where LibTorch's
      // raises or says otherwise: LibTorch's own then decides.
      at::Tensor fast = fast_bce(out, tgt, loss);
      if (fast.defined() && std::isfinite(fast.item<double>())) return fast;
      return at::binary_cross_entropy(out, tgt, weight, red);
    }
    case LossType::BceWithLogits: {
      c10::optional<at::Tensor> pos;
      if (!loss.pos_weight.empty()) pos = at::tensor(loss.pos_weight, at::kDouble).to(opts);
      return at::binary_cross_entropy_with_logits(out, tgt, weight, pos, red);
    }
    case LossType::CrossEntropy: return at::cross_entropy_loss(out, tgt, weight, red, loss.ignore_index, loss.label_smoothing);
    case LossType::Nll: return at::nll_loss_nd(out, tgt, weight, red, loss.ignore_index);
    case LossType::Mse: return at::mse_loss(out, tgt, red);
    case LossType::L1: return at::l1_loss(out, tgt, red);
    case LossType::SmoothL1: return at::smooth_l1_loss(out, tgt, red, loss.beta);
    case LossType::Dice:
    case LossType::DiceCe:
    case LossType::Jaccard:
    case LossType::Focal: return region_loss(out, tgt, loss);
    case LossType::None:
    case LossType::Model:
    case LossType::Step: break;
  }
  throw InternalError("compute_loss: no loss for type none");
}


}  // namespace

LossResult run_loss(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss, const c10::Device& device,
                    bool sync, at::Tensor* keep) {
  LossResult r;
  try {
    at::AutoGradMode grad(keep != nullptr);
    at::Tensor l = compute_loss(out, tgt, loss);
    if (keep) *keep = l;
    if (device.is_cuda() && sync) torch::cuda::synchronize(device.index());
    // A CPU float loss is read where it lies: the copies would cost more than the loss.
    at::Tensor host = kernel_ready(l) && l.is_floating_point() ? l : l.detach().to(at::kCPU).to(at::kDouble).contiguous();
    r.elements = static_cast<uint64_t>(host.numel());
    auto scan = [&r](const auto* p) {
      r.value = r.elements ? static_cast<double>(p[0]) : 0.0;
      for (uint64_t i = 0; i < r.elements; ++i) {
        if (!std::isfinite(p[i])) {
          if (r.nonfinite == 0) r.value = static_cast<double>(p[i]);
          ++r.nonfinite;
        }
      }
    };
    if (host.scalar_type() == at::kFloat) scan(host.data_ptr<float>());
    else scan(host.data_ptr<double>());
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = parse_error_text(exception_message(e)).message;
  }
  return r;
}

bool plain_finite_rule(const ValueRule& r) { return r.finite && !r.lo && !r.hi && !r.class_index; }

ValueStats check_value(const c10::IValue& v, const ValueRule& rule) {
  if (v.isTensor()) return check_tensor(for_kernel(v.toTensor().detach()), rule);
  ValueStats batch;
  if (!v.isTensorList()) return batch;  // dicts of samples (detection targets): forward's to judge
  const c10::List<at::Tensor> list = v.toTensorList();
  for (std::size_t i = 0; i < list.size(); ++i) {
    add_sample(batch, check_tensor(for_kernel(list.get(i).detach().unsqueeze(0)), rule), i);
  }
  return batch;
}

bool floating_value(const c10::IValue& v) {
  if (v.isTensor()) return at::isFloatingType(v.toTensor().scalar_type());
  return v.isTensorList() && v.toTensorList().size() > 0 && at::isFloatingType(v.toTensorList().get(0).scalar_type());
}

TensorMeta meta_of_value(const c10::IValue& v) {
  if (v.isTensor()) return meta_of(v.toTensor());
  TensorMeta m;
  if (!v.isList()) return m;
  const c10::List<c10::IValue> list = v.toList();
  m.present = true;
  m.shape = {static_cast<int64_t>(list.size())};
  if (!v.isTensorList()) {
    m.dtype = "dict";
    return m;
  }
  const c10::List<at::Tensor> tensors = v.toTensorList();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor t = tensors.get(i);
    if (i == 0) {
      TensorMeta first = meta_of(t);
      m.dtype = first.dtype;
      m.floating = first.floating;
      m.shape.insert(m.shape.end(), first.shape.begin(), first.shape.end());
      continue;
    }
    if (static_cast<std::size_t>(t.dim()) + 1 != m.shape.size()) return m;
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (m.shape[static_cast<std::size_t>(d) + 1] != t.size(d)) m.shape[static_cast<std::size_t>(d) + 1] = -1;
    }
  }
  return m;
}

void check_gradients(const std::vector<std::pair<std::string, at::Tensor>>& params, BackwardResult& r) {
  at::NoGradGuard no_grad;
  std::vector<std::size_t> which;
  std::vector<at::Tensor> grads;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = params[i].second.grad();
    if (!g.defined() || !at::isFloatingType(g.scalar_type())) continue;
    which.push_back(i);
    grads.push_back(g);
  }
  if (grads.empty()) return;
  auto add = [&](std::size_t k, uint64_t nan, uint64_t inf) {
    if (nan + inf == 0) return;
    GradStats s{params[which[k]].first, static_cast<uint64_t>(grads[k].numel()), nan, inf};
    if (r.nonfinite.size() < kMaxNonfiniteGrads) r.nonfinite.push_back(s);
    ++r.nonfinite_total;
  };
  if (std::all_of(grads.begin(), grads.end(), kernel_ready)) {
    // The check kernel reads them where they lie: on small models the dispatches of the
    // reductions below cost more than the gradients' size.
    for (std::size_t k = 0; k < grads.size(); ++k) {
      const ValueStats v = check_tensor(grads[k], ValueRule{});
      add(k, v.nan, v.inf);
    }
    return;
  }
  // One L1 norm per gradient in one call, one host transfer: a NaN or Inf anywhere makes
  // its norm non-finite. Exact counts only for those (a finite overflow then counts 0).
  at::Tensor norms = at::stack(at::_foreach_norm(grads, 1)).to(at::kDouble).to(at::kCPU).contiguous();
  const double* v = norms.data_ptr<double>();
  for (std::size_t k = 0; k < grads.size(); ++k) {
    if (std::isfinite(v[k])) continue;
    add(k, static_cast<uint64_t>(at::isnan(grads[k]).sum().item<int64_t>()),
        static_cast<uint64_t>(at::isinf(grads[k]).sum().item<int64_t>()));
  }
}

}  // namespace batchcheck
