// The only translation unit that runs models: LibTorch headers stay here.
#include "engine/torch_backend.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/print_handler.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include <condition_variable>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <functional>
#include <future>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>

#include "core/contract.h"
#include "core/error_text.h"
#include "core/errors.h"
#include "core/file_kind.h"
#include "core/files.h"
#include "core/npy.h"
#include "core/worker.h"
#include "engine/compat.h"
#include "core/text.h"

namespace batchcheck {

namespace {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

at::ScalarType torch_dtype(NpyDtype d) {
  switch (d) {
    case NpyDtype::Float16: return at::kHalf;
    case NpyDtype::Float32: return at::kFloat;
    case NpyDtype::Float64: return at::kDouble;
    case NpyDtype::Int8: return at::kChar;
    case NpyDtype::Int16: return at::kShort;
    case NpyDtype::Int32: return at::kInt;
    case NpyDtype::Int64: return at::kLong;
    case NpyDtype::UInt8: return at::kByte;
    case NpyDtype::Bool: return at::kBool;
  }
  return at::kFloat;
}

TensorMeta meta_of(const at::Tensor& t, bool drop_first = false) {
  TensorMeta m;
  if (!t.defined()) return m;
  m.present = true;
  auto sizes = t.sizes();
  m.shape.assign(sizes.begin() + (drop_first && !sizes.empty() ? 1 : 0), sizes.end());
  m.dtype = dtype_name(t.scalar_type());
  m.floating = at::isFloatingType(t.scalar_type());
  return m;
}

// The kernel works on float32, float64 and int64 in CPU memory.
at::Tensor for_kernel(at::Tensor t) {
  at::ScalarType st = t.scalar_type();
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

at::Tensor compute_loss(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss) {
  int64_t red = loss.reduction == Reduction::Mean  ? at::Reduction::Mean
                : loss.reduction == Reduction::Sum ? at::Reduction::Sum
                                                   : at::Reduction::None;
  auto opts = at::TensorOptions().dtype(out.scalar_type()).device(out.device());
  c10::optional<at::Tensor> weight;
  if (!loss.weight.empty()) weight = at::tensor(loss.weight, at::kDouble).to(opts);
  switch (loss.type) {
    case LossType::Bce: return at::binary_cross_entropy(out, tgt, weight, red);
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
    case LossType::None: break;
  }
  throw InternalError("compute_loss: no loss for type none");
}

std::string exception_message(const std::exception& e);

// The loss of one batch, and whether it is finite. Never throws for a failing loss.
// With `keep`, the loss is computed with autograd and stored there for backward().
LossResult run_loss(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss, const c10::Device& device,
                    bool sync, at::Tensor* keep = nullptr) {
  LossResult r;
  try {
    at::AutoGradMode grad(keep != nullptr);
    at::Tensor l = compute_loss(out, tgt, loss);
    if (keep) *keep = l;
    if (device.is_cuda() && sync) torch::cuda::synchronize(device.index());
    at::Tensor host = l.detach().to(at::kCPU).to(at::kDouble).contiguous().view({-1});
    r.elements = static_cast<uint64_t>(host.numel());
    const double* p = host.data_ptr<double>();
    r.value = r.elements ? p[0] : 0.0;
    for (uint64_t i = 0; i < r.elements; ++i) {
      if (!std::isfinite(p[i])) {
        if (r.nonfinite == 0) r.value = p[i];
        ++r.nonfinite;
      }
    }
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = parse_error_text(exception_message(e)).message;
  }
  return r;
}

// A batch's prediction and target, frozen: checked on the worker thread while the main
// thread runs the next forward.
class TorchBatchView : public BatchView {
 public:
  TorchBatchView(at::Tensor output, at::Tensor target, c10::Device device, bool sync)
      : output_(std::move(output)), target_(std::move(target)), device_(device), sync_(sync) {}
  ValueStats check(Slot slot, const ValueRule& rule) override {
    at::Tensor& cached = slot == Slot::Output ? output_host_ : target_host_;
    if (!cached.defined()) cached = for_kernel((slot == Slot::Output ? output_ : target_).detach());
    return check_tensor(cached, rule);
  }
  LossResult loss(const LossConfig& loss) override { return run_loss(output_, target_, loss, device_, sync_); }

 private:
  at::Tensor output_, target_, output_host_, target_host_;
  c10::Device device_;
  bool sync_;
};

// Warnings the model raises (TorchScript's warnings.warn, TORCH_WARN): one line each on
// stderr, once per distinct message, instead of glog's multi-line banner on every batch.
class ModelWarnings : public compat::WarningSink {
 public:
  void on_warning(const std::string& message) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!seen_.insert(message).second) return;
    std::cerr << "batchcheck: warning from the model: " << single_line(message) << "\n";
  }

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
};

// A failed forward or backward: the message, TorchScript's source location and traceback.
template <class Result>
void fill_error(Result& r, const std::exception& e) {
  ErrorText t = parse_error_text(exception_message(e));
  r.error = t.message;
  r.location = t.location;
  r.traceback = t.traceback;
}

// What an IValue is, in Python's words (never LibTorch's GenericDict/GenericList).
std::string describe(const c10::IValue& v) {
  if (v.isTensor()) return "a tensor";
  if (v.isGenericDict()) return "a dict";
  if (v.isList()) return "a list";
  if (v.isTuple()) return "a tuple";
  if (v.isString()) return "a string";
  if (v.isInt()) return "an int";
  if (v.isDouble()) return "a float";
  if (v.isBool()) return "a bool";
  if (v.isNone()) return "None";
  if (v.isObject()) return "an object";
  return "a " + std::string(v.tagKind());
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool plain_finite_rule(const ValueRule& r) { return r.finite && !r.lo && !r.hi && !r.class_index; }

std::string exception_message(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

// --- data sources ---------------------------------------------------------------

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual uint64_t samples() const = 0;
  virtual bool has_targets() const = 0;
  virtual TensorMeta sample_meta(bool target) const = 0;
  virtual at::Tensor gather(bool target, const std::vector<int64_t>& indices) const = 0;
  // Bytes read per sample (inputs and targets), to decide whether prefetching pays.
  uint64_t sample_bytes() const {
    uint64_t total = 0;
    for (bool target : {false, true}) {
      TensorMeta m = sample_meta(target);
      if (!m.present) continue;
      const uint64_t size = m.dtype == "float64" || m.dtype == "int64"   ? 8
                            : m.dtype == "float32" || m.dtype == "int32" ? 4
                            : m.dtype == "float16" || m.dtype == "int16" ? 2
                                                                         : 1;
      total += size * m.numel();
    }
    return total;
  }
};



class NpySource : public DataSource {
 public:
  explicit NpySource(const DataConfig& d) {
    inputs_ = std::make_unique<NpyFile>(d.inputs_display, d.inputs);
    if (d.has_targets) {
      targets_ = std::make_unique<NpyFile>(d.targets_display, d.targets);
      if (targets_->samples() != inputs_->samples()) {
        throw InputError(d.targets_display, "",
                         "holds " + std::to_string(targets_->samples()) + " samples but " + d.inputs_display + " holds " +
                             std::to_string(inputs_->samples()) + "; inputs and targets must have the same count");
      }
    }
  }
  uint64_t samples() const override { return inputs_->samples(); }
  bool has_targets() const override { return targets_ != nullptr; }
  TensorMeta sample_meta(bool target) const override {
    const NpyFile* f = target ? targets_.get() : inputs_.get();
    TensorMeta m;
    if (!f) return m;
    m.present = true;
    for (std::size_t i = 1; i < f->header().shape.size(); ++i) m.shape.push_back(static_cast<int64_t>(f->header().shape[i]));
    m.dtype = to_string(f->header().dtype);
    at::ScalarType t = torch_dtype(f->header().dtype);
    m.floating = at::isFloatingType(t);
    return m;
  }
  at::Tensor gather(bool target, const std::vector<int64_t>& indices) const override {
    const NpyFile* f = target ? targets_.get() : inputs_.get();
    if (!f) return {};
    std::vector<int64_t> shape{static_cast<int64_t>(indices.size())};
    for (std::size_t i = 1; i < f->header().shape.size(); ++i) shape.push_back(static_cast<int64_t>(f->header().shape[i]));
    // Read straight into the tensor's storage: no intermediate copy.
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(torch_dtype(f->header().dtype)));
    f->read_rows(indices, t.data_ptr());
    return t;
  }

 private:
  std::unique_ptr<NpyFile> inputs_, targets_;
};

class PtSource : public DataSource {
 public:
  explicit PtSource(const DataConfig& d) : display_(d.path_display) {
    require_regular_file(display_, d.path, "a file written by torch.save");
    std::ifstream in(d.path, std::ios::binary);
    if (!in) throw InputError(display_, "", "cannot read: " + std::string(std::strerror(errno)));
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    c10::IValue v;
    try {
      v = torch::pickle_load(bytes);
    } catch (const std::exception& e) {
      std::string hint = data_file_hint(classify_torch_file(std::string_view(bytes.data(), bytes.size())));
      if (!hint.empty()) throw InputError(display_, "", hint);
      throw InputError(display_, "", "not a file written by torch.save (" + single_line(exception_message(e)).substr(0, 200) + ")");
    }
    if (v.isGenericDict()) {
      auto dict = v.toGenericDict();
      auto lookup = [&](const std::string& key, bool required) -> at::Tensor {
        for (const auto& item : dict) {
          if (item.key().isString() && item.key().toStringRef() == key) {
            if (!item.value().isTensor()) {
              throw InputError(display_, "key \"" + key + "\"", "is not a tensor (got " + describe(item.value()) + ")");
            }
            return item.value().toTensor();
          }
        }
        if (!required) return {};
        std::vector<std::string> keys;
        for (const auto& item : dict) keys.push_back(item.key().isString() ? item.key().toStringRef() : "?");
        std::string hint = did_you_mean(key, keys);
        throw InputError(display_, "key \"" + key + "\"", "missing from the saved dict (keys: " + join(keys) + ")" + hint);
      };
      inputs_ = lookup(d.inputs, true);
      targets_ = lookup(d.targets, d.targets_explicit);
    } else if (v.isTuple() || v.isList()) {
      std::vector<c10::IValue> items;
      if (v.isTuple()) {
        for (const auto& e : v.toTupleRef().elements()) items.push_back(e);
      } else {
        for (const auto& e : v.toListRef()) items.push_back(e);
      }
      if (items.size() != 2 && items.size() != 1) {
        throw InputError(display_, "", "expected a tuple or list of (inputs, targets), got " + std::to_string(items.size()) + " elements");
      }
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!items[i].isTensor()) {
          throw InputError(display_, "element " + std::to_string(i), "is not a tensor (got " + describe(items[i]) + ")");
        }
      }
      inputs_ = items[0].toTensor();
      if (items.size() == 2) targets_ = items[1].toTensor();
    } else if (v.isTensor()) {
      inputs_ = v.toTensor();
    } else {
      throw InputError(display_, "", "expected a dict of tensors or a tuple (inputs, targets), got " + describe(v));
    }
    if (inputs_.dim() == 0) throw InputError(display_, "inputs", "a 0-d tensor has no sample dimension");
    if (targets_.defined()) {
      if (targets_.dim() == 0) throw InputError(display_, "targets", "a 0-d tensor has no sample dimension");
      if (targets_.size(0) != inputs_.size(0)) {
        throw InputError(display_, "", "inputs hold " + std::to_string(inputs_.size(0)) + " samples but targets hold " +
                                           std::to_string(targets_.size(0)) + "; they must have the same count");
      }
    }
    inputs_ = inputs_.contiguous();
    if (targets_.defined()) targets_ = targets_.contiguous();
  }
  uint64_t samples() const override { return static_cast<uint64_t>(inputs_.size(0)); }
  bool has_targets() const override { return targets_.defined(); }
  TensorMeta sample_meta(bool target) const override { return meta_of(target ? targets_ : inputs_, true); }
  at::Tensor gather(bool target, const std::vector<int64_t>& indices) const override {
    const at::Tensor& t = target ? targets_ : inputs_;
    if (!t.defined()) return {};
    bool consecutive = !indices.empty();
    for (std::size_t i = 1; i < indices.size() && consecutive; ++i) consecutive = indices[i] == indices[i - 1] + 1;
    if (consecutive) return t.narrow(0, indices.front(), static_cast<int64_t>(indices.size())).clone();
    return t.index_select(0, at::tensor(indices, at::kLong));
  }

 private:
  std::string display_;
  at::Tensor inputs_, targets_;
};

// --- the backend ----------------------------------------------------------------

class TorchBackend : public Backend {
 public:
  TorchBackend(const Config& cfg, const BackendOptions& opt) : cfg_(cfg), opt_(opt) {
    // A print() in the model's TorchScript goes to stderr: stdout holds only the report.
    torch::jit::setPrintHandler([](const std::string& s) { std::cerr << s << std::flush; });
    static ModelWarnings warnings;
    compat::set_warning_handler(&warnings);
    if (opt.threads) at::set_num_threads(static_cast<int>(*opt.threads));
    pick_device();
    if (cfg.data.format == DataFormat::Npy) {
      data_ = std::make_unique<NpySource>(cfg.data);
    } else {
      data_ = std::make_unique<PtSource>(cfg.data);
    }
    load_model();
  }

  DatasetInfo dataset() const override {
    DatasetInfo d;
    d.samples = data_->samples();
    d.input = data_->sample_meta(false);
    d.target = data_->sample_meta(true);
    d.has_targets = data_->has_targets();
    return d;
  }

  ModelInfo model() const override { return model_info_; }

  void load_batch(const std::vector<int64_t>& indices) override {
    Staged s;
    if (pending_.valid()) {
      s = pending_.get();  // rethrows what the worker threw (e.g. a truncated file)
      if (s.indices != indices) s = stage(indices);
    } else {
      s = stage(indices);
    }
    input_ = std::move(s.input);
    target_ = std::move(s.target);
    input_stats_ = std::move(s.input_stats);
    output_ = at::Tensor();
    loss_ = at::Tensor();
    checked_.clear();
  }

  TensorMeta meta(Slot slot) const override { return meta_of(tensor(slot)); }

  void prefetch(const std::vector<int64_t>& indices) override {
    // A thread hand-off costs microseconds: worth it only when reading costs more.
    constexpr uint64_t kMinBytes = 256 * 1024;
    if (indices.size() * data_->sample_bytes() < kMinBytes) return;
    if (!worker_) worker_ = std::make_unique<Worker<Staged>>();
    pending_ = worker_->submit([this, indices] { return stage(indices); });
  }

  ValueStats check(Slot slot, const ValueRule& rule) override {
    if (slot == Slot::Input && input_stats_ && plain_finite_rule(rule)) return *input_stats_;
    return check_tensor(host_view(slot), rule);
  }

  ForwardResult forward() override {
    ForwardResult r;
    try {
      // With backward on, autograd records the graph as in training.
      at::AutoGradMode grad(opt_.backward);
      c10::IValue out = module_.forward({input_});
      output_ = select_output(out);
      synchronize();
      r.ok = true;
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      fill_error(r, e);
    }
    return r;
  }

  LossResult loss(const LossConfig& loss) override {
    return run_loss(output_, target_, loss, device_, opt_.sync, opt_.backward ? &loss_ : nullptr);
  }

  std::shared_ptr<BatchView> snapshot() override {
    // Backward needs this batch's graph and the parameters' gradients on the main thread.
    if (opt_.backward) return nullptr;
    return std::make_shared<TorchBatchView>(output_, target_, device_, opt_.sync);
  }

  BackwardResult backward() override {
    BackwardResult r;
    at::Tensor l = std::move(loss_);
    loss_ = at::Tensor();
    if (!l.defined() || !l.requires_grad()) {
      r.ok = true;  // nothing in the model takes a gradient
      return r;
    }
    try {
      if (l.numel() != 1) l = l.sum();  // reduction="none"
      l.backward();
      synchronize();
      r.ok = true;
      check_gradients(r);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      fill_error(r, e);
    }
    output_ = output_.detach();  // frees the graph; the shape stays for the report
    clear_gradients();
    return r;
  }

  // Parameters never change (no optimizer step): restoring the buffers (running statistics,
  // num_batches_tracked) as they were in the file gives the model as loaded, without a reload.
  void reset_model() override {
    at::NoGradGuard no_grad;
    for (auto& [buffer, saved] : saved_buffers_) buffer.copy_(saved);
  }

  std::string device() const override { return device_.str(); }

  std::vector<std::string> nonfinite_batchnorm_stats() override {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < batchnorm_.size(); ++i) {
      for (const char* attr : {"running_mean", "running_var"}) {
        if (!batchnorm_[i].hasattr(attr)) continue;
        c10::IValue v = batchnorm_[i].attr(attr);
        if (v.isTensor() && v.toTensor().defined() && !at::isfinite(v.toTensor()).all().item<bool>()) {
          out.push_back(model_info_.batchnorm_modules[i]);
          break;
        }
      }
    }
    return out;
  }

 private:
  void pick_device() {
    std::string d = opt_.device;
    const bool wants_cuda = d == "auto" || d.rfind("cuda", 0) == 0;
    if (wants_cuda && opt_.sync) {
      // Must precede CUDA's initialization to take effect: errors then surface at the
      // failing kernel's call site instead of a later, unrelated one.
      ::setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
    }
    if (d == "auto") d = torch::cuda::is_available() ? "cuda" : "cpu";
    if (d.rfind("cuda", 0) == 0) {
      if (!torch::cuda::is_available()) {
        throw InputError("", "device", "\"" + opt_.device + "\" requested, but CUDA is not available (this LibTorch build has no CUDA support or no GPU is visible); use --device cpu");
      }
      c10::Device dev(d);
      if (dev.has_index() && dev.index() >= static_cast<int>(torch::cuda::device_count())) {
        throw InputError("", "device", "\"" + d + "\" does not exist: " + std::to_string(torch::cuda::device_count()) + " CUDA device(s) visible");
      }
      device_ = dev.has_index() ? dev : c10::Device(c10::kCUDA, 0);
    } else {
      device_ = c10::Device(c10::kCPU);
    }
  }

  // Gradients that are not finite, by parameter. One reduction per parameter and one
  // host transfer; exact counts only for the parameters whose sum is not finite.
  void check_gradients(BackwardResult& r) {
    at::NoGradGuard no_grad;
    std::vector<std::size_t> which;
    std::vector<at::Tensor> grads;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& g = params_[i].second.grad();
      if (!g.defined() || !at::isFloatingType(g.scalar_type())) continue;
      which.push_back(i);
      grads.push_back(g);
    }
    if (grads.empty()) return;
    // One L1 norm per gradient in one call, one host transfer: a NaN or Inf anywhere makes
    // its norm non-finite. Exact counts only for those (a finite overflow then counts 0).
    at::Tensor norms = at::stack(at::_foreach_norm(grads, 1)).to(at::kDouble).to(at::kCPU).contiguous();
    const double* v = norms.data_ptr<double>();
    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (std::isfinite(v[k])) continue;
      const at::Tensor& g = grads[k];
      GradStats s;
      s.name = params_[which[k]].first;
      s.elements = static_cast<uint64_t>(g.numel());
      s.nan = static_cast<uint64_t>(at::isnan(g).sum().item<int64_t>());
      s.inf = static_cast<uint64_t>(at::isinf(g).sum().item<int64_t>());
      if (s.nan + s.inf == 0) continue;
      if (r.nonfinite.size() < kMaxNonfiniteGrads) r.nonfinite.push_back(s);
      ++r.nonfinite_total;
    }
  }

  void clear_gradients() {
    for (auto& p : params_) {
      if (p.second.grad().defined()) p.second.mutable_grad() = at::Tensor();  // zero_grad(set_to_none=True)
    }
  }

  // Training-mode flags that tracing turned into constants: aten::batch_norm's `training`
  // and aten::dropout's `train` are graph inputs in a scripted module (self.training), but
  // literals in a traced one.
  void find_frozen_mode_ops(const torch::jit::Method& method) {
    std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(method.function()).graph()->copy();
    torch::jit::Inline(*graph);
    std::vector<torch::jit::Block*> blocks{graph->block()};
    while (!blocks.empty()) {
      torch::jit::Block* block = blocks.back();
      blocks.pop_back();
      for (torch::jit::Node* node : block->nodes()) {
        for (torch::jit::Block* b : node->blocks()) blocks.push_back(b);
        const std::string kind = node->kind().toQualString();
        std::size_t arg = 0;
        bool is_bn = false;
        if (kind == "aten::batch_norm") {
          arg = 5;
          is_bn = true;
        } else if (kind == "aten::dropout" || kind == "aten::feature_dropout" || kind == "aten::alpha_dropout" ||
                   kind == "aten::feature_alpha_dropout") {
          arg = 2;
        } else {
          continue;
        }
        if (node->inputs().size() <= arg) continue;
        c10::optional<c10::IValue> flag = torch::jit::toIValue(node->input(arg));
        if (!flag || !flag->isBool()) continue;  // computed from self.training: follows model.train()
        FrozenModeOps& ops = flag->toBool() ? model_info_.frozen_train : model_info_.frozen_eval;
        ++(is_bn ? ops.batch_norm : ops.dropout);
      }
    }
  }

  void load_module() {
    const std::string& path = cfg_.model.path;
    try {
      module_ = torch::jit::load(path, device_);
    } catch (const std::exception& e) {
      std::string hint = model_file_hint(classify_torch_file(read_all(path)));
      if (!hint.empty()) throw InputError(path, "", hint);
      std::string msg = single_line(parse_error_text(exception_message(e)).message);
      if (msg.size() > 240) msg = msg.substr(0, 240) + "...";
      throw InputError(path, "", "not a loadable TorchScript archive (torch.jit.save of a scripted or traced module): " + msg);
    }
    module_.train(cfg_.model.mode == Mode::Train);
    // Named once: listing a TorchScript module's parameters builds their names each time.
    for (const auto& p : module_.named_parameters(true)) params_.emplace_back(p.name, p.value);
    for (const auto& b : module_.named_buffers(true)) {
      if (b.value.defined()) saved_buffers_.emplace_back(b.value, b.value.detach().clone());
    }
    for (const auto& m : module_.named_modules()) {
      auto type = m.value.type()->name();
      if (type && type->qualifiedName().find("BatchNorm") != std::string::npos) {
        model_info_.batchnorm_modules.push_back(m.name.empty() ? "<root>" : m.name);
        batchnorm_.push_back(m.value);
      }
    }
  }

  void load_model() {
    const std::string& path = cfg_.model.path;
    std::error_code exists_ec;
    if (std::filesystem::exists(path, exists_ec)) require_regular_file(path, path, "a TorchScript file (torch.jit.save)");
    {
      std::ifstream probe(path, std::ios::binary);
      if (!probe) throw InputError(path, "", "cannot read the model: " + std::string(std::strerror(errno)));
      if (probe.peek() == std::ifstream::traits_type::eof()) throw InputError(path, "", "the model file is empty");
    }
    load_module();
    auto method = module_.find_method("forward");
    if (!method) throw InputError(path, "", "the TorchScript module has no forward method");
    const auto& args = method->function().getSchema().arguments();
    std::size_t required = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (!args[i].default_value()) ++required;
    }
    if (required != 1) {
      std::vector<std::string> names;
      for (std::size_t i = 1; i < args.size(); ++i) names.push_back(args[i].name());
      throw InputError(path, "forward", "takes " + std::to_string(required) + " required inputs (" + join(names) +
                                            "); batchcheck feeds exactly one input tensor");
    }
    find_frozen_mode_ops(*method);
  }

  at::Tensor select_output(const c10::IValue& out) const {
    const std::string where = "model.output";
    const auto& sel = cfg_.model.output;
    if (!sel) {
      if (out.isTensor()) return out.toTensor();
      throw InputError(cfg_.file, where,
                       "the model returns " + describe(out) + ", not a tensor; set \"output\" to the index or key of the prediction");
    }
    c10::IValue picked;
    if (std::holds_alternative<int64_t>(*sel)) {
      int64_t idx = std::get<int64_t>(*sel);
      std::vector<c10::IValue> items;
      if (out.isTuple()) {
        for (const auto& e : out.toTupleRef().elements()) items.push_back(e);
      } else if (out.isList()) {
        for (const auto& e : out.toListRef()) items.push_back(e);
      } else {
        throw InputError(cfg_.file, where, "is an index, but the model returns " + describe(out) + ", not a tuple or list");
      }
      const auto n = static_cast<int64_t>(items.size());
      if (idx < -n || idx >= n) {
        throw InputError(cfg_.file, where, "index " + std::to_string(idx) + " is out of range: the model returns " + std::to_string(n) + " elements");
      }
      picked = items[static_cast<std::size_t>(idx < 0 ? idx + n : idx)];
    } else {
      const std::string& key = std::get<std::string>(*sel);
      if (!out.isGenericDict()) {
        throw InputError(cfg_.file, where, "is a key, but the model returns " + describe(out) + ", not a dict");
      }
      std::vector<std::string> keys;
      bool found = false;
      for (const auto& item : out.toGenericDict()) {
        std::string k = item.key().isString() ? item.key().toStringRef() : "?";
        keys.push_back(k);
        if (k == key) {
          picked = item.value();
          found = true;
        }
      }
      if (!found) {
        throw InputError(cfg_.file, where, "the model's output has no key \"" + key + "\" (keys: " + join(keys) + ")" + did_you_mean(key, keys));
      }
    }
    if (!picked.isTensor()) throw InputError(cfg_.file, where, "selects " + describe(picked) + ", not a tensor");
    return picked.toTensor();
  }

  // A batch read ahead: its tensors, and the finiteness check of its inputs.
  struct Staged {
    std::vector<int64_t> indices;
    at::Tensor input, target;
    std::optional<ValueStats> input_stats;
  };

  // Runs on the worker thread for prefetched batches (data sources are read-only).
  Staged stage(const std::vector<int64_t>& indices) const {
    Staged s;
    s.indices = indices;
    s.input = data_->gather(false, indices);
    s.target = data_->gather(true, indices);
    if (at::isFloatingType(s.input.scalar_type())) s.input_stats = check_tensor(for_kernel(s.input), ValueRule{});
    if (device_.is_cuda()) {
      s.input = s.input.to(device_);
      if (s.target.defined()) s.target = s.target.to(device_);
    }
    return s;
  }

  const at::Tensor& tensor(Slot slot) const {
    switch (slot) {
      case Slot::Input: return input_;
      case Slot::Output: return output_;
      case Slot::Target: return target_;
    }
    return input_;
  }

  // A contiguous CPU float32/float64/int64 copy (or view) for the check kernel.
  at::Tensor host_view(Slot slot) {
    auto key = static_cast<int>(slot);
    auto it = checked_.find(key);
    if (it != checked_.end()) return it->second;
    at::Tensor t = tensor(slot).detach();
    if (!t.defined()) throw InternalError("check: no tensor for this slot");
    t = for_kernel(t);
    checked_[key] = t;
    return t;
  }

  void synchronize() {
    if (device_.is_cuda() && opt_.sync) torch::cuda::synchronize(device_.index());
  }

  const Config& cfg_;
  BackendOptions opt_;
  c10::Device device_{c10::kCPU};
  std::unique_ptr<DataSource> data_;
  torch::jit::Module module_;
  ModelInfo model_info_;
  std::vector<torch::jit::Module> batchnorm_;  // parallel to model_info_.batchnorm_modules
  std::vector<std::pair<std::string, at::Tensor>> params_;  // qualified name, parameter
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_buffers_;  // buffer, its value in the file
  at::Tensor input_, target_, output_, loss_;
  std::optional<ValueStats> input_stats_;
  std::map<int, at::Tensor> checked_;
  // Declared last: destroyed first, so the worker stops before the data it reads goes.
  std::future<Staged> pending_;
  std::unique_ptr<Worker<Staged>> worker_;
};

}  // namespace

std::unique_ptr<Backend> make_torch_backend(const Config& cfg, const BackendOptions& options) {
  return std::make_unique<TorchBackend>(cfg, options);
}

}  // namespace batchcheck
