#include "core/scan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <map>
#include <sstream>
#include <tuple>

#include "core/classify.h"
#include "core/export_guard.h"
#include "core/contract.h"
#include "core/errors.h"
#include "core/factor.h"
#include "core/findings.h"
#include "core/fixes.h"
#include "core/suggest.h"
#include "core/text.h"
#include "core/value_findings.h"
#include "core/worker.h"

namespace batchcheck {

namespace {

struct BatchContext {
  std::optional<uint64_t> rank;
  std::optional<uint64_t> batch;
  bool probe = false;
  const std::vector<int64_t>* indices = nullptr;
  uint64_t size = 0;
};

struct BatchShapes {
  uint64_t index = 0, size = 0;
  TensorMeta input, output, target;
};

nlohmann::ordered_json shapes_json(const BatchShapes& b) {
  auto shape = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.shape) : nlohmann::ordered_json(); };
  return {{"index", b.index},
          {"size", b.size},
          {"input_shape", shape(b.input)},
          {"output_shape", shape(b.output)},
          {"target_shape", shape(b.target)}};
}

// The Backend's current batch as a BatchView, for the synchronous path.
class CurrentBatch : public BatchView {
 public:
  explicit CurrentBatch(Backend& b) : backend_(b) {}
  ValueStats check(Slot slot, const ValueRule& rule) override { return backend_.check(slot, rule); }
  LossResult loss(const LossConfig& loss) override { return backend_.loss(loss); }

 private:
  Backend& backend_;
};

// A batch whose post-forward stage runs on the worker.
struct PendingPost {
  std::vector<int64_t> indices;
  BatchContext ctx;
  std::future<std::vector<Emitted>> result;
};

class Scanner {
 public:
  Scanner(const Config& cfg, const ScanSettings& settings, Backend& backend, std::ostream& log)
      : cfg_(cfg), settings_(settings), backend_(backend), log_(log) {}

  ScanResult run(const OrderFn& order);

 private:
  void check_batch(const BatchContext& ctx, const std::vector<int64_t>* next = nullptr);
  void record(const BatchContext& ctx, const std::string& id, const std::string& stage, const std::string& message,
              nlohmann::ordered_json evidence, const std::vector<uint64_t>& rows, uint64_t total_rows,
              const std::string& cuda_equivalent = "");
  // `stats`: the result of view.check(slot, rule) when the caller already has it.
  // rows_are_samples false: the tensor's rows are not the batch's (batch-dim-mismatch), so
  // what is found concerns the whole batch.
  void check_values(const BatchContext& ctx, Slot slot, const ValueRule& rule, const TensorMeta& meta, BatchView& view,
                    std::vector<Emitted>& out, const ValueStats* stats = nullptr, bool rows_are_samples = true) const;
  // Value checks of prediction and target, then the loss: pure, so it may run on the worker.
  std::vector<Emitted> post_stage(const BatchContext& ctx, const ContractPlan& plan, const TensorMeta& output,
                                  const TensorMeta& target, BatchView& view, bool prior_error) const;
  void apply(const BatchContext& ctx, const std::vector<Emitted>& emitted);
  void collect_pending();
  void check_batchnorm_stats(const BatchContext& ctx);
  void run_backward(const BatchContext& ctx);
  void run_probes(const DatasetInfo& data, ScanResult& result);
  void mode_findings();
  void finish_findings(const std::vector<uint64_t>& ranks);
  bool stop_requested() const { return device_lost_ || (settings_.stop && settings_.stop->load() != 0); }
  void progress(uint64_t done, uint64_t total, bool final = false);

  const Config& cfg_;
  const ScanSettings& settings_;
  Backend& backend_;
  std::ostream& log_;
  std::optional<BatchPlan> plan_;
  std::vector<Finding> findings_;
  // (id, rank or -1, probe size or 0) -> finding
  std::map<std::tuple<std::string, int64_t, uint64_t>, std::size_t> index_;
  std::vector<std::vector<int64_t>> first_batch_;  // per finding: its first batch's indices
  bool backward_ = false;
  uint64_t largest_ok_batch_ = 0;
  bool batch_has_error_ = false;
  // A device-side assert leaves the CUDA context unusable: nothing after it can run.
  bool device_lost_ = false;
  ModelInfo model_;
  std::vector<std::string> bad_batchnorm_;  // BatchNorm modules whose statistics are already NaN
  std::unique_ptr<PendingPost> pending_;
  std::unique_ptr<Worker<std::vector<Emitted>>> worker_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

void Scanner::record(const BatchContext& ctx, const std::string& id, const std::string& stage,
                     const std::string& message, nlohmann::ordered_json evidence, const std::vector<uint64_t>& rows,
                     uint64_t total_rows, const std::string& cuda_equivalent) {
  batch_has_error_ = true;
  auto key = std::make_tuple(id, ctx.rank ? static_cast<int64_t>(*ctx.rank) : -1, ctx.probe ? ctx.size : 0);
  auto it = index_.find(key);
  Finding* f;
  if (it == index_.end()) {
    index_[key] = findings_.size();
    findings_.emplace_back();
    first_batch_.push_back(*ctx.indices);
    f = &findings_.back();
    f->id = id;
    f->severity = Severity::Error;
    f->rank = ctx.rank;
    f->batch = ctx.batch;
    f->probe = ctx.probe;
    f->probe_size = ctx.probe ? ctx.size : 0;
    f->stage = stage;
    f->message = message;
    f->evidence = std::move(evidence);
    f->evidence["batch_size"] = ctx.size;
    f->cuda_equivalent = cuda_equivalent;
  } else {
    f = &findings_[it->second];
  }
  // A finding is per (id, rank, probe size): a new occurrence is a new batch (a probe has one).
  const bool new_batch = f->occurrences_total == 0 || (ctx.batch && f->batches.back() != *ctx.batch);
  if (new_batch && ctx.batch) f->batches.push_back(*ctx.batch);
  if (new_batch) {
    ++f->occurrences_total;
    if (f->occurrences.size() < kOccurrenceCap) f->occurrences.push_back({ctx.rank, ctx.batch, {}, 0});
  }
  // This batch's occurrence, unless it fell past the cap.
  Occurrence* occ = f->occurrences.size() == f->occurrences_total ? &f->occurrences.back() : nullptr;
  const bool first = occ && occ == &f->occurrences.front();
  for (uint64_t r : rows) {
    // A row of the batch, never of a tensor that is larger than the batch.
    if (r >= ctx.indices->size()) continue;
    const int64_t idx = (*ctx.indices)[r];
    if (occ && occ->samples.size() < kSampleCap &&
        std::find(occ->samples.begin(), occ->samples.end(), idx) == occ->samples.end()) {
      occ->samples.push_back(idx);
    }
    // `samples` is the first occurrence's: never merged across batches or ranks.
    if (first && f->samples.size() < kSampleCap && std::find(f->samples.begin(), f->samples.end(), idx) == f->samples.end()) {
      f->samples.push_back(idx);
    }
  }
  if (occ) occ->count += total_rows;
  f->count += total_rows;
}

void Scanner::check_values(const BatchContext& ctx, Slot slot, const ValueRule& rule, const TensorMeta& meta,
                           BatchView& view, std::vector<Emitted>& out, const ValueStats* stats,
                           bool rows_are_samples) const {
  ValueStats s = stats ? *stats : view.check(slot, rule);
  if (s.ok()) return;
  for (auto& e : value_findings(slot, rule, meta, view, s, cfg_.loss, ctx.size, rows_are_samples)) out.push_back(std::move(e));
}

void Scanner::check_batch(const BatchContext& ctx, const std::vector<int64_t>* next) {
  batch_has_error_ = false;
  backend_.load_batch(*ctx.indices);
  if (next) backend_.prefetch(*next);
  const TensorMeta input = backend_.meta(Slot::Input);
  if (auto rule = input_rule(input)) {
    CurrentBatch current(backend_);
    std::vector<Emitted> emitted;
    check_values(ctx, Slot::Input, *rule, input, current, emitted);
    apply(ctx, emitted);
  }
  const bool inputs_bad = batch_has_error_;

  ForwardResult fwd = backend_.forward();
  // The previous batch's post-forward stage ran during this forward: record it now,
  // before this batch's own post stage, so every id sees its batches in order.
  collect_pending();
  if (!fwd.ok) {
    const std::optional<ExportGuard> guard = parse_export_guard(fwd.error);
    std::string id = guard ? "export-shape-guard" : classify_forward_error(fwd.error, ctx.size, largest_ok_batch_);
    nlohmann::ordered_json ev = {{"error", fwd.error}};
    if (!fwd.location.empty()) ev["location"] = fwd.location;
    if (!fwd.traceback.empty()) ev["traceback"] = fwd.traceback;
    if (largest_ok_batch_) ev["largest_ok_batch_size"] = largest_ok_batch_;
    if (id == "batchnorm-single-value" && !model_.batchnorm_modules.empty()) {
      ev["batchnorm_modules"] = model_.batchnorm_modules;
    }
    const std::string cuda = cuda_equivalent_of_forward_error(fwd.error);
    std::string msg;
    const TensorMeta in = backend_.meta(Slot::Input);
    if (in.present && in.dtype == "float64" && is_dtype_mismatch_error(fwd.error)) {
      // The classic: float64 numpy data into a float32 model.
      ev["cause"] = "input-dtype";
      ev["input_dtype"] = in.dtype;
      msg = "the inputs are float64 but the model computes in float32; forward raised on a batch of " +
            plural(ctx.size, "sample") + ": " + fwd.error;
    } else if (guard) {
      static const char* kinds[] = {"min", "max", "size", "stride", "dtype", "device"};
      ev["guard"] = {{"input", guard->input}, {"dim", guard->dim}, {"check", kinds[static_cast<int>(guard->kind)]},
                     {"expected", guard->expected}, {"got", guard->got}};
      // AOTInductor skips these checks unless AOTI_RUNTIME_CHECK_INPUTS is set (batchcheck sets it).
      msg = describe_export_guard(*guard, ctx.size) +
            "; in training, AOTInductor runs its compiled code on this batch unchecked (the checks run only with "
            "AOTI_RUNTIME_CHECK_INPUTS=1): outside the shapes it was compiled for, its results are undefined";
    } else if (id == "cuda-device-assert") {
      device_lost_ = true;
      msg = "a CUDA kernel's assertion fired during forward on a batch of " + plural(ctx.size, "sample") + ": " + fwd.error +
            "; the device is unusable after it, so the scan stopped here (--device cpu names the failing op)";
    } else if (id == "batchnorm-single-value") {
      msg = "BatchNorm saw one value per channel in train mode on a batch of " + plural(ctx.size, "sample") + ": " + fwd.error;
    } else if (id == "hardcoded-batch-size") {
      msg = "forward runs at batch size " + std::to_string(largest_ok_batch_) + " but fails at " +
            std::to_string(ctx.size) + " with a shape error: " + fwd.error;
    } else {
      msg = "forward raised on a batch of " + plural(ctx.size, "sample") + ": " + fwd.error;
    }
    record(ctx, id, "forward", msg, ev, all_rows(ctx.size), ctx.size, cuda);
    return;
  }
  largest_ok_batch_ = std::max(largest_ok_batch_, ctx.size);
  // NaN inputs turn running statistics NaN at any batch size: that is input-nonfinite's
  // finding, not a single value per channel.
  if (cfg_.model.mode == Mode::Train && !model_.batchnorm_modules.empty() && ctx.size == 1 && !inputs_bad) {
    check_batchnorm_stats(ctx);
  }

  const TensorMeta output = backend_.meta(Slot::Output);
  const TensorMeta target = backend_.meta(Slot::Target);
  ContractPlan plan = plan_contract(cfg_.loss, cfg_.checks, ctx.size, output, target);
  for (const auto& issue : plan.issues) {
    record(ctx, issue.id, issue.id == "target-dtype" ? "target" : "output", issue.message, issue.evidence,
           all_rows(ctx.size), ctx.size);
  }
  const bool prior_error = batch_has_error_;
  const uint64_t elements = output.numel() + target.numel();
  // Overlapping costs a thread hand-off (microseconds): only for large batches.
  std::shared_ptr<BatchView> view = elements >= (1u << 16) ? backend_.snapshot() : nullptr;
  if (!view) {
    CurrentBatch current(backend_);
    apply(ctx, post_stage(ctx, plan, output, target, current, prior_error));
    // The loss was computed and is finite exactly when nothing was found in this batch.
    if (backward_ && plan.can_compute_loss && !batch_has_error_) run_backward(ctx);
    return;
  }
  if (!worker_) worker_ = std::make_unique<Worker<std::vector<Emitted>>>();
  pending_ = std::make_unique<PendingPost>();
  pending_->indices = *ctx.indices;
  pending_->ctx = ctx;
  pending_->ctx.indices = &pending_->indices;
  const BatchContext* job_ctx = &pending_->ctx;
  pending_->result = worker_->submit([this, job_ctx, plan, output, target, view, prior_error] {
    return post_stage(*job_ctx, plan, output, target, *view, prior_error);
  });
}

std::vector<Emitted> Scanner::post_stage(const BatchContext& ctx, const ContractPlan& plan, const TensorMeta& output,
                                         const TensorMeta& target, BatchView& view, bool prior_error) const {
  std::vector<Emitted> out;
  if (plan.output_rule) {
    check_values(ctx, Slot::Output, *plan.output_rule, output, view, out, nullptr, plan.output_rows_are_samples);
  }
  std::optional<ValueStats> target_stats;
  if (plan.target_rule) {
    target_stats = view.check(Slot::Target, *plan.target_rule);
    check_values(ctx, Slot::Target, *plan.target_rule, target, view, out, &*target_stats);
  }
  if (!plan.can_compute_loss || prior_error || !out.empty()) return out;

  LossResult loss = view.loss(cfg_.loss);
  const std::vector<uint64_t> all = all_rows(ctx.size);
  if (!loss.ok) {
    out.push_back({"loss-error", "loss", std::string(to_string(cfg_.loss.type)) + " raised: " + loss.error,
                   {{"error", loss.error}}, all, ctx.size, ""});
  } else if (loss.nonfinite) {
    std::string why;
    if (plan.class_targets && cfg_.loss.reduction == Reduction::Mean && target_stats &&
        target_stats->ignored == target_stats->elements) {
      why = ": every target equals ignore_index " + std::to_string(cfg_.loss.ignore_index) +
            ", and the mean over zero elements is NaN";
    }
    out.push_back({"loss-nonfinite", "loss",
                   std::string(to_string(cfg_.loss.type)) + " loss is " + format_number(loss.value) + why,
                   {{"loss", std::isnan(loss.value) ? nlohmann::ordered_json("nan") : nlohmann::ordered_json(format_number(loss.value))},
                    {"nonfinite_elements", loss.nonfinite}},
                   all, ctx.size, ""});
  }
  return out;
}

void Scanner::apply(const BatchContext& ctx, const std::vector<Emitted>& emitted) {
  for (const auto& e : emitted) record(ctx, e.id, e.stage, e.message, e.evidence, e.rows, e.total, e.cuda);
}

void Scanner::collect_pending() {
  if (!pending_) return;
  std::unique_ptr<PendingPost> p = std::move(pending_);
  const bool had_error = batch_has_error_;
  apply(p->ctx, p->result.get());
  batch_has_error_ = had_error;  // the flag belongs to the batch being checked now
}

void Scanner::run_backward(const BatchContext& ctx) {
  BackwardResult b = backend_.backward();
  if (!b.ok) {
    nlohmann::ordered_json ev = {{"error", b.error}};
    if (!b.location.empty()) ev["location"] = b.location;
    if (!b.traceback.empty()) ev["traceback"] = b.traceback;
    if (is_device_assert(b.error)) device_lost_ = true;
    record(ctx, device_lost_ ? "cuda-device-assert" : "backward-error", "backward",
           "loss.backward() raised on a batch of " + plural(ctx.size, "sample") + " (forward and loss succeeded): " + b.error +
               (device_lost_ ? "; the device is unusable after it, so the scan stopped here" : ""),
           ev, all_rows(ctx.size), ctx.size);
    return;
  }
  if (b.nonfinite_total == 0) return;
  nlohmann::ordered_json params = nlohmann::ordered_json::array();
  std::vector<std::string> names;
  for (const auto& g : b.nonfinite) {
    params.push_back({{"name", g.name}, {"elements", g.elements}, {"nan", g.nan}, {"inf", g.inf}});
    if (names.size() < 3) names.push_back(g.name + " (" + nonfinite_text(g.nan, g.inf, ", ") + ")");
  }
  std::string more = b.nonfinite_total > names.size() ? " and " + std::to_string(b.nonfinite_total - names.size()) + " more" : "";
  record(ctx, "gradient-nonfinite", "backward",
         "loss.backward() on a batch of " + plural(ctx.size, "sample") + " gave non-finite gradients to " +
             plural(b.nonfinite_total, "parameter") + ": " + join(names) + more +
             "; one optimizer step would write NaN/Inf into the weights",
         {{"parameters", params}, {"nonfinite_parameters", b.nonfinite_total}}, all_rows(ctx.size), ctx.size);
}

void Scanner::check_batchnorm_stats(const BatchContext& ctx) {
  // Only a batch of one can give BatchNorm a single value per channel; NaN statistics
  // stay NaN, so only modules that were finite before this batch count.
  std::vector<std::string> fresh;
  for (const auto& name : backend_.nonfinite_batchnorm_stats()) {
    if (std::find(bad_batchnorm_.begin(), bad_batchnorm_.end(), name) == bad_batchnorm_.end()) {
      fresh.push_back(name);
      bad_batchnorm_.push_back(name);
    }
  }
  if (fresh.empty()) return;
  record(ctx, "batchnorm-single-value", "forward",
         "BatchNorm saw one value per channel in train mode on a batch of 1 sample and raised nothing "
         "(a traced model loses PyTorch's check), but its running_var became NaN: every evaluation after "
         "this epoch returns NaN",
         {{"batchnorm_modules", fresh}, {"nonfinite_running_stats", true}}, {0}, 1);
}

// Probes: batches of the given sizes from the start of the dataset, on the model exactly
// as loaded from its file (no running statistics from the replay's batches).
void Scanner::run_probes(const DatasetInfo& data, ScanResult& result) {
  if (!result.complete) return;
  bool reset = false;
  for (uint64_t size : cfg_.checks.probe_batch_sizes) {
    if (size > data.samples || size == 0 || stop_requested()) continue;
    if (!reset) {
      collect_pending();
      backend_.reset_model();
      bad_batchnorm_ = backend_.nonfinite_batchnorm_stats();
      reset = true;
    }
    std::vector<int64_t> probe(size);
    for (uint64_t i = 0; i < size; ++i) probe[i] = static_cast<int64_t>(i);
    BatchContext ctx{std::nullopt, std::nullopt, true, &probe, size};
    check_batch(ctx);
    if (settings_.verbosity > 0) {
      log_ << "probe batch of " << size << ": " << (batch_has_error_ ? "findings" : "ok") << "\n";
    }
  }
  collect_pending();
  if (stop_requested()) result.complete = false;
}

namespace {

// The batch sizes the configured loader delivers (the same on every rank).
std::vector<uint64_t> produced_sizes(const Geometry& g) {
  std::vector<uint64_t> out;
  if (g.full_batches > 0) out.push_back(g.spec.batch_size);
  if (g.last_batch_size > 0 && g.last_batch_size != g.spec.batch_size) out.push_back(g.last_batch_size);
  return out;
}

// The smallest dataset at least as large as this one whose loader ends on a batch of `size`.
uint64_t dataset_size_for_tail(const Geometry& g, uint64_t size) {
  const uint64_t b = g.spec.batch_size, w = g.spec.world_size;
  uint64_t per_rank = g.samples_per_rank - g.samples_per_rank % b + size;
  if (per_rank < g.samples_per_rank) per_rank += b;
  return per_rank > UINT64_MAX / w ? UINT64_MAX : per_rank * w;
}

}  // namespace

void Scanner::finish_findings(const std::vector<uint64_t>& ranks) {
  const Geometry& g = plan_->geometry();
  const std::vector<uint64_t> produced = produced_sizes(g);
  // A probe that only repeats what the replay already found adds nothing.
  std::vector<std::string> replay_ids;
  for (const auto& f : findings_) {
    if (!f.probe) replay_ids.push_back(f.id);
  }
  std::vector<Finding> kept;
  std::vector<std::vector<int64_t>> kept_batches;
  for (std::size_t i = 0; i < findings_.size(); ++i) {
    Finding& f = findings_[i];
    if (f.probe && std::find(replay_ids.begin(), replay_ids.end(), f.id) != replay_ids.end()) continue;
    if (f.probe && std::find(produced.begin(), produced.end(), f.probe_size) == produced.end()) {
      // The loader never delivers this size: a fragile model, not a failing setup.
      f.severity = Severity::Warning;
      std::vector<std::string> sizes;
      for (uint64_t p : produced) sizes.push_back(std::to_string(p));
      f.message += "; the configured loader never delivers a batch of " + std::to_string(f.probe_size) +
                   (sizes.empty() ? std::string(" (it delivers no batch)") : " (its batches hold " + join(sizes, " or ") + " samples)") +
                   ", so training does not hit this now";
      if (f.probe_size < g.spec.batch_size) {
        f.message += "; it would with " + plural(f.probe_size, "sample") + " left over per rank, e.g. a dataset of " +
                     std::to_string(dataset_size_for_tail(g, f.probe_size)) + " samples" +
                     (g.spec.drop_last ? " with drop_last=False" : "");
      }
      f.evidence["delivered_batch_sizes"] = produced;
    }
    kept.push_back(std::move(f));
    kept_batches.push_back(std::move(first_batch_[i]));
  }
  findings_ = std::move(kept);
  first_batch_ = std::move(kept_batches);

  FixContext fc;
  fc.geometry = &g;
  fc.loss = cfg_.loss;
  fc.mode = cfg_.model.mode;
  fc.backward = backward_;
  fc.output = cfg_.model.output;
  for (std::size_t i = 0; i < findings_.size(); ++i) {
    fc.batch_indices = first_batch_[i];
    if (findings_[i].fixes.empty()) attach_fixes(findings_[i], fc);
  }
  for (auto& f : geometry_findings(*plan_, ranks, cfg_.loss.type)) {
    if (f.id == "tail-batch-singleton" && !model_.batchnorm_modules.empty()) {
      f.message += "; the model has BatchNorm (" + model_.batchnorm_modules.front() +
                   (model_.batchnorm_modules.size() > 1 ? " and " + std::to_string(model_.batchnorm_modules.size() - 1) + " more" : "") + ")";
    }
    findings_.push_back(std::move(f));
  }
}

// A traced archive runs BatchNorm and dropout in the mode it was traced in: say so when
// the scan asks for the other one, since a train-mode failure then cannot show.
void Scanner::mode_findings() {
  const bool train = cfg_.model.mode == Mode::Train;
  const FrozenModeOps& frozen = train ? model_.frozen_eval : model_.frozen_train;
  if (frozen.total() == 0) return;
  std::vector<std::string> ops;
  if (frozen.batch_norm) ops.push_back(plural(frozen.batch_norm, "batch_norm op", "batch_norm ops"));
  if (frozen.dropout) ops.push_back(plural(frozen.dropout, "dropout op", "dropout ops"));
  const char* traced_in = train ? "eval" : "train";
  Finding f;
  f.id = "trace-mode-mismatch";
  f.severity = Severity::Warning;
  f.stage = "model";
  f.message = "the model was traced in " + std::string(traced_in) + " mode: " + join(ops, " and ") +
              (frozen.total() == 1 ? " has" : " have") + " training=" + (train ? "False" : "True") + " frozen into the graph, so mode \"" + to_string(cfg_.model.mode) +
              "\" has no effect on them" +
              (train ? "; BatchNorm uses its running statistics and dropout is off, so train-time failures "
                       "(BatchNorm on one value per channel) cannot show in this replay"
                     : "; BatchNorm normalizes with batch statistics and updates them, and dropout stays on");
  f.evidence = {{"traced_in", traced_in},
                {"scan_mode", to_string(cfg_.model.mode)},
                {"frozen_batch_norm_ops", frozen.batch_norm},
                {"frozen_dropout_ops", frozen.dropout}};
  findings_.push_back(std::move(f));
  first_batch_.emplace_back();
}

void Scanner::progress(uint64_t done, uint64_t total, bool final) {
  if (!settings_.progress || settings_.verbosity < 0) return;
  auto now = std::chrono::steady_clock::now();
  if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double eta = done ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0;
  const int width = 30;
  int filled = total ? static_cast<int>(static_cast<double>(width) * static_cast<double>(done) / static_cast<double>(total)) : width;
  std::ostringstream line;
  line << "\r[" << std::string(static_cast<std::size_t>(filled), '#') << std::string(static_cast<std::size_t>(width - filled), '.')
       << "] " << done << "/" << total << " batches";
  if (!final) line << ", ETA " << static_cast<long long>(std::ceil(eta)) << "s ";
  log_ << line.str() << (final ? "\n" : "") << std::flush;
}

ScanResult Scanner::run(const OrderFn& order) {
  ScanResult result;
  start_ = std::chrono::steady_clock::now();
  const DatasetInfo data = backend_.dataset();
  model_ = backend_.model();
  backward_ = backward_enabled(cfg_);
  mode_findings();
  bad_batchnorm_ = backend_.nonfinite_batchnorm_stats();  // already broken in the file: not ours to report
  LoaderSpec spec = loader_spec(cfg_.loader, data.samples);
  plan_.emplace(compute_geometry(spec), order(spec));
  const Geometry& g = plan_->geometry();

  std::vector<uint64_t> ranks;
  if (settings_.rank) {
    if (*settings_.rank >= spec.world_size) {
      throw InputError("", "--rank", "rank " + std::to_string(*settings_.rank) + " does not exist with world_size " +
                                         std::to_string(spec.world_size) + " (ranks are 0.." +
                                         std::to_string(spec.world_size - 1) + ")");
    }
    ranks.push_back(*settings_.rank);
  } else {
    for (uint64_t r = 0; r < spec.world_size; ++r) ranks.push_back(r);
  }

  std::vector<uint64_t> batch_list;
  if (g.batches_per_rank > 0) {
    if (settings_.edges) {
      batch_list.push_back(0);
      if (g.batches_per_rank > 1) batch_list.push_back(g.batches_per_rank - 1);
    } else {
      uint64_t n = cfg_.checks.max_batches ? std::min(cfg_.checks.max_batches, g.batches_per_rank) : g.batches_per_rank;
      for (uint64_t b = 0; b < n; ++b) batch_list.push_back(b);
    }
  }
  const uint64_t total = batch_list.size() * ranks.size();
  if (settings_.verbosity > 0) {
    log_ << "batchcheck: " << data.samples << " samples, " << g.batches_per_rank << " batches per rank, checking "
         << total << " batches on " << backend_.device() << "\n";
  }

  std::optional<BatchShapes> first, last;
  uint64_t done = 0;
  std::vector<int64_t> indices, next;
  for (std::size_t ri = 0; ri < ranks.size(); ++ri) {
    const uint64_t rank = ranks[ri];
    if (ri > 0) {
      // Each DDP rank trains its own replica loaded from the file: no running statistics
      // carry over from the previous rank's batches.
      collect_pending();
      backend_.reset_model();
      bad_batchnorm_ = backend_.nonfinite_batchnorm_stats();
    }
    for (std::size_t bi = 0; bi < batch_list.size(); ++bi) {
      const uint64_t b = batch_list[bi];
      if (stop_requested()) {
        result.complete = false;
        break;
      }
      indices = done == 0 ? plan_->batch_indices(rank, b) : std::move(next);
      // The batch after this one, so the backend can read it during this forward.
      const bool more = bi + 1 < batch_list.size() || ri + 1 < ranks.size();
      if (more) {
        next = bi + 1 < batch_list.size() ? plan_->batch_indices(rank, batch_list[bi + 1])
                                          : plan_->batch_indices(ranks[ri + 1], batch_list.front());
      }
      BatchContext ctx{rank, b, false, &indices, indices.size()};
      check_batch(ctx, more ? &next : nullptr);
      ++done;
      if (rank == ranks.front()) {
        BatchShapes s{b, indices.size(), backend_.meta(Slot::Input), backend_.meta(Slot::Output),
                      backend_.meta(Slot::Target)};
        if (!first) first = s;
        last = s;
      }
      if (settings_.verbosity > 0) {
        log_ << "rank " << rank << " batch " << b << " (" << indices.size() << " samples): "
             << (batch_has_error_ ? "findings" : "ok") << "\n";
      }
      progress(done, total);
    }
    if (!result.complete) break;
  }
  collect_pending();
  if (total) progress(done, total, true);

  run_probes(data, result);
  finish_findings(ranks);
  std::stable_sort(findings_.begin(), findings_.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    if (a.probe != b.probe) return !a.probe;
    return false;
  });

  // The report.
  result.findings = findings_;
  result.batches_checked = done;
  result.failed = verdict_fails(findings_, settings_.fail_on);
  nlohmann::ordered_json& r = result.report;
  r["schema_version"] = 1;
  r["tool"] = {{"name", "batchcheck"}, {"version", BATCHCHECK_VERSION}, {"libtorch", settings_.libtorch_version}};
  r["config"] = cfg_.file;
  r["complete"] = result.complete;
  r["verdict"] = result.failed ? "fail" : "pass";
  r["fail_on"] = to_string(settings_.fail_on);
  r["device"] = backend_.device();
  r["mode"] = to_string(cfg_.model.mode);
  r["sync"] = cfg_.sync;
  r["backward"] = backward_;
  auto meta_shape = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.shape) : nlohmann::ordered_json(); };
  auto meta_dtype = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.dtype) : nlohmann::ordered_json(); };
  r["dataset"] = {{"samples", data.samples},
                  {"input_shape", meta_shape(data.input)},
                  {"input_dtype", meta_dtype(data.input)},
                  {"target_shape", meta_shape(data.target)},
                  {"target_dtype", meta_dtype(data.target)}};
  r["geometry"] = {{"batch_size", spec.batch_size},
                   {"drop_last", spec.drop_last},
                   {"sampler", to_string(cfg_.loader.sampler)},
                   {"shuffle", spec.shuffle},
                   {"seed", spec.seed},
                   {"epoch", spec.epoch},
                   {"world_size", spec.world_size},
                   {"sampler_drop_last", spec.sampler_drop_last},
                   {"samples_per_rank", g.samples_per_rank},
                   {"batches_per_rank", g.batches_per_rank},
                   {"last_batch_size", g.last_batch_size},
                   {"padded_samples", g.delivered_padding()},
                   {"dropped_samples", g.dropped_total()},
                   {"accumulation_steps", spec.accumulation_steps},
                   {"pytorch_equivalent", pytorch_loader_call(cfg_.loader)}};
  if (spec.accumulation_steps > 1) {
    r["geometry"]["accumulation_windows"] = g.windows;
    r["geometry"]["last_window_batches"] = g.last_window_batches;
  }
  r["batches"] = {{"checked", done},
                  {"ranks", ranks},
                  {"first", first ? shapes_json(*first) : nlohmann::ordered_json()},
                  {"last", last ? shapes_json(*last) : nlohmann::ordered_json()}};
  r["findings"] = nlohmann::ordered_json::array();
  for (const auto& f : findings_) r["findings"].push_back(to_json(f));
  SuggestRequest sr;
  sr.samples = data.samples;
  sr.batch_size = spec.batch_size;
  sr.world_size = spec.world_size;
  sr.sampler_drop_last = spec.sampler_drop_last;
  Suggestion sug = suggest(sr);
  nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
  for (const auto& c : sug.nearest) {
    sizes.push_back({{"batch_size", c.batch_size}, {"tail", c.tail}, {"batches", c.batches},
                     {"dropped_with_drop_last", c.dropped_with_drop_last}});
  }
  r["suggestions"] = {{"batch_sizes", sizes},
                      {"divisors", nearest_divisors(sug.divisors, spec.batch_size, 3)}};
  nlohmann::ordered_json notes = nlohmann::ordered_json::array();
  if (spec.shuffle && !cfg_.loader.seed_given && !spec.uses_distributed_sampler()) {
    notes.push_back("shuffle without a seed: PyTorch draws a random seed each run, so the order is not reproducible; "
                    "batchcheck used seed 0. Pass generator=torch.Generator().manual_seed(S) and set loader.seed to S.");
  }
  if (device_lost_) {
    notes.push_back("a CUDA device-side assert stopped the scan: the report covers the batches up to it");
  } else if (!result.complete) {
    notes.push_back("the scan was interrupted: the report covers only the batches checked");
  }
  if (settings_.edges) notes.push_back("--edges: only the first and last batch of each rank and the probes were checked");
  if (cfg_.checks.max_batches && !settings_.edges && cfg_.checks.max_batches < g.batches_per_rank) {
    notes.push_back("max_batches: only the first " + std::to_string(cfg_.checks.max_batches) + " batches of each rank were checked");
  }
  if (!cfg_.loader.ignored_keys.empty()) {
    notes.push_back("loader." + join(cfg_.loader.ignored_keys, ", loader.") +
                    ": accepted; they change how fast batches arrive, not which samples they hold, so the replay is the same");
  }
  r["notes"] = notes;
  SeverityCounts c = count_severities(findings_);
  r["summary"] = {{"errors", c.errors}, {"warnings", c.warnings}, {"infos", c.infos}};
  return result;
}

}  // namespace

ScanResult run_scan(const Config& cfg, const ScanSettings& settings, Backend& backend, const OrderFn& order,
                    std::ostream& log) {
  Scanner s(cfg, settings, backend, log);
  return s.run(order);
}

}  // namespace batchcheck
