// The LibTorch Backend: feeds batches from a DataSource through a ModelRunner, checks values
// and computes the loss (and its backward) on the scan's device.
#include "engine/torch_backend.h"

#include <ATen/ATen.h>
#include <malloc.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/runtime/print_handler.h>
#include <torch/cuda.h>

#include <algorithm>
#include <limits>
#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <set>

#include "core/base/errors.h"
#include "core/base/log.h"
#include "core/base/text.h"
#include "core/pipeline/classify.h"
#include "core/pipeline/contract.h"
#include "core/pipeline/worker.h"
#include "engine/checks/half_watch.h"
#include "engine/checks/tensor_checks.h"
#include "engine/compat.h"
#include "engine/cuda_runtime.h"
#include "engine/device.h"
#include "engine/data/data_source.h"
#include "engine/localize/localize.h"
#include "engine/model/localize_batch.h"
#include "engine/model/model_runner.h"
#include "engine/model/outputs.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

// A batch's prediction and target, frozen: checked on the worker thread while the main
// thread runs the next forward.
class TorchBatchView : public BatchView {
 public:
  using Localize = std::function<std::optional<Localization>(const LocalizeRequest&)>;
  // `host_target`: the target as read, where it is on the host while `target` is on the GPU.
  TorchBatchView(at::Tensor output, std::vector<at::Tensor> aux, at::Tensor target, at::Tensor host_target, c10::Device device,
                 bool sync, Localize localize)
      : output_(std::move(output)), target_(std::move(target)), target_host_(std::move(host_target)), aux_(std::move(aux)),
        device_(device), sync_(sync), localize_(std::move(localize)) {
    if (target_host_.defined()) target_host_ = for_kernel(target_host_.detach());
  }
  ValueStats check(Slot slot, const ValueRule& rule) override {
    at::Tensor& cached = slot == Slot::Output ? output_host_ : target_host_;
    if (!cached.defined()) cached = for_kernel((slot == Slot::Output ? output_ : target_).detach());
    return check_tensor(cached, rule);
  }
  LossResult loss(const LossConfig& loss) override { return run_loss(output_, target_, loss, device_, sync_); }
  ValueStats check_aux(std::size_t k, const ValueRule& rule) override { return check_tensor(for_kernel(aux_.at(k).detach()), rule); }
  LossResult aux_loss(std::size_t k, const LossConfig& loss) override { return run_loss(aux_.at(k), target_, loss, device_, sync_); }
  std::optional<Localization> localize(const LocalizeRequest& req) override { return localize_(req); }

 private:
  at::Tensor output_, target_, target_host_, output_host_;
  std::vector<at::Tensor> aux_;
  c10::Device device_;
  bool sync_;
  Localize localize_;  // holds the batch's inputs
};

// Warnings the model raises (TorchScript's warnings.warn, TORCH_WARN): one record each, from
// the model, once per distinct message, instead of glog's multi-line banner on every batch.
class ModelWarnings : public compat::WarningSink {
 public:
  void on_warning(const std::string& message) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!seen_.insert(message).second) return;
    log(LogLevel::warn, LogSource::model, message);
  }

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
};


// --- the backend ----------------------------------------------------------------

class TorchBackend : public Backend {
 public:
  TorchBackend(const Config& cfg, const BackendOptions& opt) : cfg_(cfg), opt_(opt) {
    // A print() in the model's TorchScript is the model's record at info, never on stdout
    // (the report); the log escapes it where it is written.
    if (!opt.shared_process) {
      torch::jit::setPrintHandler([](const std::string& s) {
        log(LogLevel::info, LogSource::model, std::string_view(s).substr(0, s.size() - (!s.empty() && s.back() == '\n')));
      });
    }
    static ModelWarnings warnings;
    compat::set_warning_handler(&warnings);  // this thread's own (c10 keeps it per thread)
    if (opt.shared_process) {
      // The user's process: its intra-op threads are theirs (its step runs on them meanwhile);
      // this thread's own checks take one.
      one_intraop_thread_here();
      log_debug("the engine runs in the scanning process; its checks on " + std::to_string(at::get_num_threads()) +
                " intra-op thread of their own");
    } else if (opt.threads) {
      at::set_num_threads(static_cast<int>(*opt.threads));
    } else if (cfg.model.format == ModelFormat::Eager) {
      // batchcheck.scan() runs the model (or the step) in its own process on every core; what
      // runs here (the data and loss checks) takes one thread, not a share of theirs.
      at::set_num_threads(1);
    }
    device_ = pick_device(opt, &device_note_);
    // Before the data opens: a stream (batchcheck.scan()) waits there while the caller prepares
    // the model, and this setup then costs nothing.
    if (device_.is_cuda()) warm_cuda(device_);
    if (opt.loading) opt.loading(cfg.data.format == DataFormat::Npy ? cfg.data.inputs_display : cfg.data.path_display);
    data_ = open_data_source(cfg);
    if (cfg.loss.type == LossType::Model && !data_->has_targets()) {
      throw InputError(cfg.file, "loss.type", "\"model\" passes the targets to forward, which computes the loss, but " +
                                                  cfg.data.path_display + " holds no targets");
    }
    if (cfg.model.format == ModelFormat::Eager) {
      model_ = eager_runner();
    } else {
      if (opt.loading) opt.loading(cfg.model.path);
      ModelConfig model = cfg.model;
      for (const std::string& l : data_->operator_libraries()) {
        model.libraries.push_back(l);
        model.libraries_display.push_back(l);
      }
      load_operator_libraries(model);
      model_ = cfg.model.format == ModelFormat::Pt2 ? load_pt2(cfg.model, device_)
                                                    : load_torchscript(cfg.model, device_, forward_fields(), cfg.loader.collate.list,
                                                                       dict_fields());
    }
    // Loading reads whole archives into memory and frees them: give that back before the scan.
    ::malloc_trim(0);
    set_up_precision();
  }

  DatasetInfo dataset() const override {
    DatasetInfo d;
    d.samples = data_->samples();
    d.input = data_->sample_meta(0);
    d.target = data_->sample_meta(kTargetField);
    d.has_targets = data_->has_targets();
    return d;
  }

  ModelInfo model() const override {
    ModelInfo info = model_->info();
    const ForwardCall greeted = data_->forward_call();
    info.call = greeted.forward.empty() ? cfg_.model.call : greeted;
    return info;
  }

  // Which of forward_fields() hold a dict per sample (a detection target's boxes and labels).
  std::vector<bool> dict_fields() const {
    std::vector<bool> dicts;
    for (std::size_t k = 0; k < data_->input_names().size(); ++k) dicts.push_back(data_->sample_meta(static_cast<int>(k)).dtype == "dict");
    if (cfg_.loss.type == LossType::Model) dicts.push_back(data_->sample_meta(kTargetField).dtype == "dict");
    return dicts;
  }

  // What forward is fed: the input fields, then the targets with loss type "model".
  std::vector<std::string> forward_fields() const {
    std::vector<std::string> fields = data_->input_names();
    if (cfg_.loss.type == LossType::Model) fields.push_back(cfg_.data.format == DataFormat::Pt || cfg_.data.format == DataFormat::Stream ? cfg_.data.targets : "targets");
    return fields;
  }

  // What forward takes: the input fields, then with loss type "model" the targets
  // (model(images, targets)).
  std::vector<c10::IValue> forward_args() const {
    std::vector<c10::IValue> args = inputs_;
    if (cfg_.loss.type == LossType::Model) args.push_back(target_list_.isNone() ? c10::IValue(target_) : target_list_);
    return args;
  }

  std::optional<LoadFailure> load_batch(const std::vector<int64_t>& indices) override {
    pace_threads();
    batch_size_ = indices.size();
    StagedBatch s;
    if (pending_.valid()) {
      s = pending_.get();  // rethrows what the worker threw (e.g. a truncated file)
      if (s.indices != indices) s = stage(indices);
    } else {
      s = stage(indices);
    }
    inputs_ = std::move(s.inputs);
    target_ = std::move(s.target);
    target_list_ = std::move(s.target_list);
    host_inputs_ = std::move(s.host_inputs);
    host_target_ = std::move(s.host_target);
    host_target_list_ = std::move(s.host_target_list);
    input_stats_ = std::move(s.input_stats);
    given_ = std::move(s.given);
    if (cfg_.model.format == ModelFormat::TorchScript) use_capture(given_ ? given_->capture : std::string());
    output_ = at::Tensor();
    aux_.clear();
    loss_terms_.clear();
    loss_ = at::Tensor();
    checked_.clear();
    return std::move(s.failure);
  }

  TensorMeta meta(Slot slot) const override {
    if (slot == Slot::Input) return inputs_.empty() ? TensorMeta{} : meta_of_value(inputs_.front());
    if (slot == Slot::Target && !target_list_.isNone()) return meta_of_value(target_list_);
    return meta_of(tensor(slot));
  }

  // A stream's batches come from the user's DataLoader in their own process, beside this one:
  // steps too short to divide over intra-op threads (under 2 ms, measured over 8 steps after the
  // first) run on one, leaving that process its core. P1's 3,125 steps of 64 rows: 1.9 s with
  // two threads, 1.1 s with one; a convolution's steps keep every thread.
  void pace_threads() {
    constexpr int kSteps = 8;
    if (cfg_.data.format != DataFormat::Stream || opt_.threads || opt_.shared_process || paced_steps_ > kSteps + 1) return;
    const auto now = std::chrono::steady_clock::now();
    if (++paced_steps_ == 2) pace_start_ = now;
    if (paced_steps_ == kSteps + 2 && now - pace_start_ < kSteps * std::chrono::milliseconds(2)) at::set_num_threads(1);
  }

  StagedBatch stage(const std::vector<int64_t>& indices) const {
    return stage_batch(*data_, cfg_.loader.collate.list, device_, indices);
  }

  void prefetch(const std::vector<int64_t>& indices) override {
    // A thread hand-off costs microseconds: worth it only when reading costs more.
    constexpr uint64_t kMinBytes = 256 * 1024;
    if (indices.size() * data_->sample_bytes() < kMinBytes) return;
    if (!worker_) worker_ = std::make_unique<Worker<StagedBatch>>();
    pending_ = worker_->submit([this, indices] {
      if (opt_.shared_process) one_intraop_thread_here();
      return stage(indices);
    });
  }

  ValueStats check(Slot slot, const ValueRule& rule) override {
    if (slot == Slot::Input) return check_input(0, rule);
    return check_tensor(host_view(slot), rule);
  }

  std::vector<std::string> input_names() const override { return data_->input_names(); }
  std::vector<uint64_t> input_row_samples(std::size_t field) const override {
    const std::vector<std::string>& names = data_->input_names();
    if (!given_ || field >= names.size()) return {};
    const auto it = given_->row_samples.find(names[field]);
    if (it == given_->row_samples.end()) return {};
    const at::Tensor t = it->second.contiguous();
    const int64_t* p = t.data_ptr<int64_t>();
    std::vector<uint64_t> out;
    out.reserve(static_cast<std::size_t>(t.numel()));
    for (int64_t k = 0; k < t.numel(); ++k) out.push_back(p[k] < 0 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(p[k]));
    return out;
  }
  TensorMeta input_meta(std::size_t field) const override {
    return field < inputs_.size() ? meta_of_value(inputs_[field]) : TensorMeta{};
  }
  ValueStats check_input(std::size_t field, const ValueRule& rule) override {
    if (field < input_stats_.size() && input_stats_[field] && plain_finite_rule(rule)) return *input_stats_[field];
    return check_value(inputs_.at(field), rule);
  }

  ForwardResult forward() override {
    ForwardResult r;
    if (given_ && given_->stopped) {
      // The user's step, run eagerly there, was stopped before an op it would make raise.
      r.faults = given_->faults;
      r.stopped = true;
      r.error = "batchcheck stopped the step before an op it would make raise";
      return r;
    }
    if (given_ && !given_->error.empty()) {
      // The user's own code raised on this batch, in their process: PyTorch's error, first.
      r.error = given_->error;
      r.location = given_->location;
      r.source_line = given_->source_line;
      r.raised_in = given_->raised_in;
      r.traceback = given_->traceback;
      r.module = given_->module;
      r.eager = true;
      r.unchecked = given_->unchecked;
      r.faults = given_->faults;
      return r;
    }
    std::vector<OpFault> faults;
    bool stopped = false;
    try {
      if (context_lost_) throw std::runtime_error(kDeviceAssertError);
      // With backward on, autograd records the graph as in training.
      at::AutoGradMode grad(opt_.backward);
      compat::AutocastScope autocast(device_.type(), half_.dtype, autocast_);
      HalfWatch watch(watch_on_, watched_);
      SelectedOutputs out = cfg_.model.format == ModelFormat::Eager
                                ? given_outputs()
                                : select_outputs(cfg_.loss.type == LossType::Step
                                                     ? active().forward_step(forward_args(), batch_size_, faults, stopped)
                                                     : active().forward(forward_args()),
                                                 cfg_);
      output_ = std::move(out.prediction);
      aux_ = std::move(out.aux);
      loss_terms_ = std::move(out.loss_terms);
      synchronize();
      r.ok = true;
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      fill_error(r, e);
      if (opt_.simulate_device_asserts && !stopped && (asserts_on_cuda(r.error) || is_device_assert(r.error))) {
        context_lost_ = true;
        r = ForwardResult{};
        r.error = parse_error_text(kDeviceAssertError).message;
      }
    }
    if (given_) faults.insert(faults.end(), given_->faults.begin(), given_->faults.end());  // checked there
    r.faults = std::move(faults);
    r.stopped = stopped;
    return r;
  }

  LossResult loss(const LossConfig& loss) override {
    if (returns_loss(loss.type)) return model_loss();
    compat::AutocastScope autocast(device_.type(), half_.dtype, loss_autocast(loss));
    return run_loss(output_, target_, loss, device_, opt_.sync, opt_.backward ? &loss_ : nullptr);
  }

  std::shared_ptr<BatchView> snapshot() override {
    // Backward needs this batch's graph and the parameters' gradients on the main thread.
    // autocast is the thread's: a half-precision batch's loss runs on this one.
    if (opt_.backward || returns_loss(cfg_.loss.type) || autocast_) return nullptr;
    return std::make_shared<TorchBatchView>(output_, aux_, target_, host_target_, device_, opt_.sync,
                                            [this, args = forward_args()](const LocalizeRequest& req) {
                                              return localize_batch(active(), cfg_, args, batch_size_, req);
                                            });
  }

  std::optional<Localization> localize(const LocalizeRequest& req) override {
    // The batch as it ran (a step on a GPU is localized on the CPU, under the CPU's autocast).
    compat::AutocastScope autocast(rerun_device(cfg_.loss.type == LossType::Step), half_.dtype, autocast_);
    // A step run eagerly in the user's process was re-run there: where its NaN was born.
    if (given_ && given_->localization) return given_->localization;
    // A step on a GPU is localized on the CPU: the localizer runs every op of it, the loss op
    // whose NaN input it traces among them, which would assert on the device.
    if (cfg_.loss.type == LossType::Step && device_.is_cuda()) {
      ModelRunner* host = host_model();
      if (!host) return std::nullopt;
      return localize_batch(*host, cfg_, rerun_args(true), batch_size_, req);
    }
    return localize_batch(active(), cfg_, forward_args(), batch_size_, req);
  }

  std::optional<ForwardResult> forward_rows(const std::vector<uint64_t>& rows, bool cpu) override {
    ModelRunner* model = rerun_model(cpu);
    if (!model) return std::nullopt;
    std::vector<c10::IValue> part;
    for (const auto& a : rerun_args(cpu)) {
      std::optional<c10::IValue> r = batch_rows(a, rows, batch_size_);
      if (!r) return std::nullopt;
      part.push_back(std::move(*r));
    }
    ForwardResult r;
    const std::vector<at::Tensor> kept = model->save_buffers();
    try {
      at::NoGradGuard no_grad;
      compat::AutocastScope autocast(rerun_device(cpu), half_.dtype, autocast_);
      // A step's parts run checked too: a loss op they would break stops them before it runs.
      std::vector<OpFault> faults;
      bool stopped = false;
      select_outputs(cfg_.loss.type == LossType::Step ? model->forward_step(part, rows.size(), faults, stopped) : model->forward(part),
                     cfg_);
      if (!(cpu && device_.is_cuda())) synchronize();
      r.ok = true;
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      fill_error(r, e);
    }
    model->restore_buffers(kept);
    return r;
  }

  std::optional<ArgumentRun> forward_arguments(bool cpu) override {
    ModelRunner* model = rerun_model(cpu);
    if (!model) return std::nullopt;
    const std::vector<at::Tensor> kept = model->save_buffers();
    std::optional<ArgumentRun> r;
    try {
      compat::AutocastScope autocast(rerun_device(cpu), half_.dtype, autocast_);
      r = model->check_arguments(rerun_args(cpu), batch_size_);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception&) {  // naming the cause is a bonus
      r.reset();
    }
    model->restore_buffers(kept);
    return r;
  }

  TensorMeta aux_meta(std::size_t k) const override { return k < aux_.size() ? meta_of(aux_[k]) : TensorMeta{}; }
  ValueStats check_aux(std::size_t k, const ValueRule& rule) override { return check_tensor(for_kernel(aux_.at(k).detach()), rule); }
  LossResult aux_loss(std::size_t k, const LossConfig& loss) override {
    at::Tensor l;
    LossResult r;
    {
      compat::AutocastScope autocast(device_.type(), half_.dtype, loss_autocast(loss));
      r = run_loss(aux_.at(k), target_, loss, device_, opt_.sync, opt_.backward ? &l : nullptr);
    }
    if (l.defined() && loss_.defined() && r.ok && r.nonfinite == 0) {
      // loss(out) + w * loss(aux), as the training loop sums them; reduction="none" sums first.
      auto scalar = [](const at::Tensor& t) { return t.numel() == 1 ? t.reshape({}) : t.sum(); };
      loss_ = scalar(loss_) + cfg_.loss.aux.at(k).second * scalar(l);
    }
    return r;
  }

  BackwardResult backward() override {
    BackwardResult r;
    if (given_ && (given_->gradients || !given_->backward_error.empty())) {
      // The step ran eagerly in the user's process, its gradients with it: what they held.
      r.ok = given_->backward_error.empty();
      r.error = given_->backward_error;
      for (const GradStats& g : given_->gradients.value_or(std::vector<GradStats>{})) {
        if (r.nonfinite.size() < kMaxNonfiniteGrads) r.nonfinite.push_back(g);
        ++r.nonfinite_total;
      }
      loss_ = at::Tensor();
      return r;
    }
    at::Tensor l = std::move(loss_);
    loss_ = at::Tensor();
    // The user's step returns the loss training calls backward() on: what backward refuses there
    // (a loss without a graph, more than one number) is that batch's error, in backward's words.
    const bool step = cfg_.loss.type == LossType::Step;
    if (step && l.defined() && !l.requires_grad()) {
      r.error = "element 0 of tensors does not require grad and does not have a grad_fn";
      return r;
    }
    if (!l.defined() || !l.requires_grad()) {
      r.ok = true;  // nothing in the model takes a gradient
      return r;
    }
    // The step's loss as it returned it (outputs.cpp sums a tensor of several for its value).
    const bool several = l.numel() != 1 || (loss_terms_.size() == 1 && loss_terms_.front().second.defined() &&
                                            loss_terms_.front().second.numel() != 1);
    if (step && several) {
      r.error = "grad can be implicitly created only for scalar outputs";
      output_ = output_.detach();
      return r;
    }
    try {
      if (l.numel() != 1) l = l.sum();  // a loss module's reduction="none"
      l.backward();
      synchronize();
      r.ok = true;
      check_gradients(active().parameters(), r);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      fill_error(r, e);
    }
    output_ = output_.detach();  // frees the graph; the shape stays for the report
    for (auto& a : aux_) a = a.detach();
    clear_gradients();
    return r;
  }

  HalfCheck half_check(double headroom) override {
    HalfCheck h;
    // A step run eagerly by batchcheck.scan() was watched there, op by op, as HalfWatch watches.
    if (cfg_.model.format == ModelFormat::Eager) return given_ && given_->half ? *given_->half : h;
    if (!watch_on_) return h;
    h.ran = true;
    h.dtype = dtype_name(cfg_.precision.dtype);
    h.peak = watched_.peak;
    if (!watched_.nonfinite_op.empty()) {
      LocalizeRequest req;
      req.nonfinite = true;
      req.batch = batch_size_;
      std::optional<Localization> l = localize_half(req);
      if (l && l->fp32_max) h.overflow = std::move(l);
    }
    // Placed only when it grew by a hundredth of the range past the last one placed: a few
    // instrumented forwards per scan, not one per batch.
    if (cfg_.precision.dtype == Precision::Fp16 && h.peak >= headroom * kHalfMax && h.peak > peak_placed_ + kHalfMax / 100 &&
        peaks_placed_ < kPeaksPlaced) {
      LocalizeRequest req;
      req.peak = true;
      req.batch = batch_size_;
      h.peak_site = localize_half(req);
      if (h.peak_site) {
        peak_placed_ = h.peak;
        ++peaks_placed_;
      }
    }
    return h;
  }

  void reset_model() override {
    model_->reset();
    for (auto& [name, capture] : captures_) capture->reset();
  }

  // The loss forward returned (summed over its terms, as torchvision's recipe sums them).
  LossResult model_loss() {
    LossResult r;
    try {
      for (const auto& [name, term] : loss_terms_) {
        if (!at::isfinite(term.detach()).all().item<bool>()) r.nonfinite_terms.push_back(name);
      }
      r.elements = 1;
      r.value = output_.detach().to(at::kCPU).to(at::kDouble).item<double>();
      if (!std::isfinite(r.value) || !r.nonfinite_terms.empty()) r.nonfinite = 1;
      if (opt_.backward) loss_ = output_;
      r.ok = true;
    } catch (const std::exception& e) {
      r.error = parse_error_text(exception_message(e)).message;
    }
    return r;
  }

  std::string device() const override { return device_.str(); }
  std::string device_note() const override { return device_note_; }

  std::vector<std::string> nonfinite_batchnorm_stats() override { return active().nonfinite_batchnorm_stats(); }
  std::vector<BatchNormSite> frozen_batchnorm_single_value() override {
    return active().frozen_batchnorm_single_value(forward_args());
  }

 private:
  // How the scan's precision runs: torch.autocast entered around forward and the loss (unless
  // the graph holds its own casts), every op's half output watched. Refused where this
  // LibTorch's autocast lacks the dtype on the device.
  void set_up_precision() {
    const Precision p = cfg_.precision.dtype;
    if (p == Precision::Fp32 || cfg_.model.format == ModelFormat::Eager) return;
    half_.device = device_.type();
    half_.index = device_.index();
    half_.dtype = p == Precision::Fp16 ? at::kHalf : at::kBFloat16;
    half_.recorded = cfg_.precision.recorded;
    if (!half_.recorded && !compat::autocast_supports(device_.type(), half_.dtype)) {
      const bool flag = cfg_.precision.from == "--precision";
      throw InputError(flag ? "" : cfg_.file, flag ? "--precision" : "precision",
                       std::string("fp16 autocast on the CPU needs LibTorch 2.1 or later; this batchcheck links LibTorch ") +
                           TORCH_VERSION + ": scan in bf16 here, or on a GPU (--device cuda)");
    }
    // "recorded" says the graph holds its casts (a step traced under its torch.autocast): a graph
    // without one would run in float32 while the report said float16 was watched.
    if (half_.recorded && model_) {
      if (const std::optional<bool> casts = model_->casts_to(half_.dtype); casts && !*casts) {
        throw InputError(cfg_.file, "precision.casts",
                         std::string("\"recorded\", but the model's graph holds no cast to ") +
                             (p == Precision::Fp16 ? "float16" : "bfloat16") +
                             ": set \"casts\" to \"autocast\" (the engine enters torch.autocast), or leave precision out");
      }
    }
    autocast_ = !half_.recorded;
    // bench/precision.py measures the watch's cost against a scan without it.
    const char* off = std::getenv("BATCHCHECK_BENCH_NO_HALF_WATCH");
    watch_on_ = !(off && std::string(off) == "1");
  }

  // binary_cross_entropy is refused under CUDA's autocast (bce-autocast-unsafe says so): the
  // loss runs in float32 as the fix would run it, so the scan goes on to the other checks.
  bool loss_autocast(const LossConfig& loss) const { return autocast_ && loss.type != LossType::Bce; }

  std::optional<Localization> localize_half(const LocalizeRequest& req) {
    // A step on a GPU is placed on the CPU, as its NaN's origin is: the instrumented run goes
    // on to the loss ops the overflow's NaN reaches, which would assert on the device.
    const bool host = cfg_.loss.type == LossType::Step && device_.is_cuda();
    ModelRunner* runner = host ? host_model() : &active();
    if (!runner) return std::nullopt;
    ModelRunner& model = *runner;
    HalfRun run = half_;
    run.device = rerun_device(host);
    if (host) run.index = -1;
    const std::vector<at::Tensor> kept = model.save_buffers();
    std::optional<Localization> l;
    try {
      l = model.localize_half(host ? rerun_args(true) : forward_args(), req, run);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception&) {  // placing the op is a bonus
      l.reset();
    }
    model.restore_buffers(kept);
    return l;
  }

  // What re-runs the current batch (a failed forward's search): the model, or on a lost CUDA
  // device its copy on the CPU; none where forward ran in the user's process.
  ModelRunner* rerun_model(bool cpu) {
    if (cfg_.model.format == ModelFormat::Eager) return nullptr;
    if (cpu && device_.is_cuda()) return active_.empty() ? host_model() : nullptr;  // another shape's: a bonus left out
    return &active();
  }
  // Where that re-run runs, for its autocast.
  c10::DeviceType rerun_device(bool cpu) const { return cpu && device_.is_cuda() ? c10::DeviceType::CPU : device_.type(); }
  std::vector<c10::IValue> rerun_args(bool cpu) const {
    if (!(cpu && device_.is_cuda())) return forward_args();
    std::vector<c10::IValue> args = host_inputs_;
    if (cfg_.loss.type == LossType::Model) args.push_back(host_target_list_.isNone() ? c10::IValue(host_target_) : host_target_list_);
    return args;
  }

  // The model as saved, on the CPU: for a batch re-run after a device-side assert. A .pt2
  // program is compiled for its device: none.
  ModelRunner* host_model() {
    if (cfg_.model.format != ModelFormat::TorchScript) return nullptr;
    if (!host_model_) {
      try {
        host_model_ = load_torchscript(cfg_.model, c10::Device(c10::kCPU), forward_fields(), cfg_.loader.collate.list, dict_fields());
      } catch (const std::exception&) {
        return nullptr;  // naming samples is a bonus
      }
    }
    return host_model_.get();
  }

  // The capture that runs the current batch: the model's archive, or another shape's beside it
  // (batchcheck.scan()'s step, traced per batch shape), loaded when first named.
  ModelRunner& active() { return active_.empty() ? *model_ : *captures_.at(active_); }

  void use_capture(const std::string& name) {
    if (name == active_) return;
    if (!name.empty() && !captures_.count(name)) {
      ModelConfig m = cfg_.model;
      m.path = (std::filesystem::path(cfg_.model.path).parent_path() / name).string();
      captures_[name] = load_torchscript(m, device_, forward_fields(), cfg_.loader.collate.list, dict_fields());
    }
    // One model, several captures of it: the running statistics go on from where they are.
    ModelRunner& from = active();
    const std::vector<at::Tensor> buffers = from.save_buffers();
    active_ = name;
    ModelRunner& to = active();
    const std::vector<at::Tensor> mine = to.save_buffers();
    bool fits = mine.size() == buffers.size();
    for (std::size_t i = 0; fits && i < mine.size(); ++i) fits = mine[i].sizes() == buffers[i].sizes();
    if (fits) to.restore_buffers(buffers);
  }

  void clear_gradients() {
    for (const auto& p : active().parameters()) {
      at::Tensor param = p.second;  // shares the parameter's storage and autograd meta
      if (param.grad().defined()) param.mutable_grad() = at::Tensor();  // zero_grad(set_to_none=True)
    }
  }

  const at::Tensor& tensor(Slot slot) const {
    switch (slot) {
      case Slot::Input: return inputs_.empty() || !inputs_.front().isTensor() ? none_ : inputs_.front().toTensor();
      case Slot::Output: return output_;
      case Slot::Target: return target_;
    }
    return none_;
  }

  // A contiguous CPU float32/float64/int64 copy (or view) for the check kernel.
  at::Tensor host_view(Slot slot) {
    auto key = static_cast<int>(slot);
    auto it = checked_.find(key);
    if (it != checked_.end()) return it->second;
    // On a GPU the target as read is still on the host: no copy back from the device.
    at::Tensor t = (slot == Slot::Target && host_target_.defined() ? host_target_ : tensor(slot)).detach();
    if (!t.defined()) throw InternalError("check: no tensor for this slot");
    t = for_kernel(t);
    checked_[key] = t;
    return t;
  }

  void synchronize() {
    if (device_.is_cuda() && opt_.sync) torch::cuda::synchronize(device_.index());
  }

  // model.format "eager": what the user's forward returned in their process, or raised there
  // (thrown here, so that it is classified as any forward's error).
  c10::IValue given_output() const {
    if (!given_) throw InputError(cfg_.file, "model.format", "\"eager\" needs each batch's prediction from batchcheck.scan(); the stream sent none");
    if (!given_->error.empty()) throw std::runtime_error(given_->error);
    return given_->output.to(device_);
  }

  // The prediction forward gave in the user's process, and loss.aux's outputs sent beside it
  // (batchcheck.scan() selected each: the engine has no model output to select from).
  SelectedOutputs given_outputs() const {
    c10::IValue out = given_output();
    if (cfg_.loss.aux.empty() || returns_loss(cfg_.loss.type)) return select_outputs(out, cfg_);
    SelectedOutputs r;
    r.prediction = out.toTensor();
    for (const auto& [key, weight] : cfg_.loss.aux) {
      const auto it = given_->aux.find(key);
      if (it == given_->aux.end()) {
        throw InputError(cfg_.file, "loss.aux." + key, "the stream sent no output \"" + key + "\" beside the prediction");
      }
      r.aux.push_back(it->second.to(device_));
    }
    return r;
  }

  const Config& cfg_;
  BackendOptions opt_;
  static constexpr unsigned kPeaksPlaced = 8;
  HalfRun half_;
  bool autocast_ = false, watch_on_ = false;
  HalfWatchResult watched_;  // the last forward's
  double peak_placed_ = 0;
  unsigned peaks_placed_ = 0;
  bool context_lost_ = false;  // simulate_device_asserts: a device-side assert happened
  int paced_steps_ = 0;
  std::chrono::steady_clock::time_point pace_start_;
  c10::Device device_{c10::kCPU};
  std::string device_note_;  // why "cuda" is this GPU, under a launcher
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<ModelRunner> model_;
  std::map<std::string, std::unique_ptr<ModelRunner>> captures_;  // other shapes' captures, by file name
  std::string active_;                                           // which runs the batch ("": model_)
  std::unique_ptr<ModelRunner> host_model_;  // on the CPU, loaded at the first device-side assert
  std::vector<c10::IValue> host_inputs_;      // on a CUDA device: the batch as read, on the host
  at::Tensor host_target_;
  c10::IValue host_target_list_;
  std::vector<c10::IValue> inputs_;  // the input fields, in forward's order
  uint64_t batch_size_ = 0;
  at::Tensor target_, output_, loss_, none_;
  c10::IValue target_list_;  // loader.collate.list: the targets as a list of samples
  std::vector<at::Tensor> aux_;  // loss.aux's outputs
  std::vector<std::pair<std::string, at::Tensor>> loss_terms_;  // loss type "model": forward's losses
  std::vector<std::optional<ValueStats>> input_stats_;  // per input field, when floating
  std::optional<GivenForward> given_;  // model.format "eager"
  std::map<int, at::Tensor> checked_;
  // Declared last: destroyed first, so the worker stops before the data it reads goes.
  std::future<StagedBatch> pending_;
  std::unique_ptr<Worker<StagedBatch>> worker_;
};

}  // namespace

std::unique_ptr<Backend> make_torch_backend(const Config& cfg, const BackendOptions& options) {
  return std::make_unique<TorchBackend>(cfg, options);
}

}  // namespace batchcheck
