#include "core/aggregate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/catalog.h"
#include "core/findings.h"
#include "core/fixes.h"
#include "core/forward_stage.h"
#include "core/journal.h"
#include "core/localize_stage.h"
#include "core/model_findings.h"
#include "core/shard.h"
#include "core/suggest.h"
#include "core/text.h"

namespace batchcheck {

namespace {

nlohmann::ordered_json shapes_json(const BatchShapes& b) {
  auto shape = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.shape) : nlohmann::ordered_json(); };
  return {{"index", b.index},
          {"size", b.size},
          {"input_shape", shape(b.input)},
          {"output_shape", shape(b.output)},
          {"target_shape", shape(b.target)}};
}


}  // namespace

Aggregator::Aggregator(const Config& cfg, const ScanSettings& settings, std::ostream& log)
    : cfg_(cfg), settings_(settings), log_(log), t0_(std::chrono::steady_clock::now()) {
  if (settings_.shard) journal_ = std::make_unique<JournalWriter>(&scratch_);
  shard_ = settings_.shard;
}

Aggregator::~Aggregator() = default;

namespace {

// A later batch that raised something else under the same id (a bad box, then a bad label):
// its message is kept. Counts and shapes that differ are the same cause.
bool other_cause(const RecordEvent& r, const Finding& f) {
  return r.evidence.contains("error") && f.evidence.contains("error") && r.evidence["error"] != f.evidence["error"];
}

}  // namespace

void Aggregator::start(const ScanStart& s) {
  if (started_) return;  // a resumed replay announces the same scan again
  start_ = s;
  if (journal_) {
    journal_->start(s);
    start_line_ = scratch_.back();
    scratch_.clear();
  }
  advance_watermark();
  series_.reset(s.ranks.size(), s.ranks.empty() ? 0 : s.replay_steps / s.ranks.size());
  mode_findings();
  if (auto f = model_nonfinite_finding(s.model, cfg_.model.path)) {
    findings_.push_back(std::move(*f));
    first_batch_.emplace_back();
  }
  if (settings_.verbosity > 0) log_ << scan_start_line(s);
  started_.store(true, std::memory_order_release);  // start_ is complete: scan_start() may be read
}

std::string scan_start_line(const ScanStart& s) {
  return "batchcheck: " + std::to_string(s.data.samples) + " samples, checking " + std::to_string(s.replay_steps) +
         " batches on " + s.device + "\n";
}

void Aggregator::begin(const StepInfo& s, const std::vector<int64_t>& indices) { open_[s.step] = {s, indices}; }

void Aggregator::record(RecordEvent&& r) { pending_[r.at.step].push_back(std::move(r)); }

void Aggregator::end(const StepEnd& e) {
  auto open = open_.find(e.step);
  ended(open == open_.end() ? nullptr : &open->second.first, e);
  if (open != open_.end()) open_.erase(open);
}

void Aggregator::clean_step(const StepInfo& at, const StepEnd& e) { ended(&at, e); }

void Aggregator::ended(const StepInfo* at, const StepEnd& e) {
  if (journal_) {
    // A part of a scan keeps each step's committed journal for joining (core/step_log.h).
    auto p = pending_.find(e.step);
    if (at && (p == pending_.end() || p->second.empty())) {
      step_log_.clean(*at, e);
    } else {
      // Without its indices: the records carry the samples they name, and a committed step
      // is never failed again.
      if (at) journal_->begin(*at, {});
      if (p != pending_.end()) {
        for (const auto& r : p->second) journal_->record(RecordEvent(r));
      }
      journal_->end(e);
      log_step(e.step);
    }
  }
  std::optional<Severity> worst;
  auto it = pending_.find(e.step);
  if (it != pending_.end()) {
    for (auto& r : it->second) {
      if (r.stage == "forward") {
        if (auto again = reclassify_forward_failure(r.id, r.evidence, r.count, largest_ok_batch(), start_.model.batchnorm_modules)) {
          r.id = again->id;
          r.message = again->message;
          r.evidence = again->evidence;
        }
      }
      commit(r);
      const Severity s = default_severity(r.id);
      if (!worst || s > *worst) worst = s;
    }
    pending_.erase(it);
  }
  const bool probe = at && at->probe;
  if (at && !probe && at->batch && e.step < start_.replay_steps) series_.add(e.step, *at->batch, e.size, e.stats, worst);
  if (e.step == watermark_) {
    ++watermark_;  // in order, as most steps end
  } else {
    ended_above_.insert(e.step);
  }
  advance_watermark();
  if (e.forward_ok && e.size > largest_ok_batch()) largest_ok_.store(e.size, std::memory_order_relaxed);  // this thread only writes it
  if (e.shapes) {
    // The lowest and highest step: --fail-fast checks the last batch early.
    if (!first_ || e.step < first_step_) {
      first_ = e.shapes;
      first_step_ = e.step;
    }
    if (!last_ || e.step >= last_step_) {
      last_ = e.shapes;
      last_step_ = e.step;
    }
  }
  if (!probe && e.step < start_.replay_steps) {
    done_.fetch_add(1, std::memory_order_release);  // after start_: steps_total() is then safe to read
    progress();
  }
}

void Aggregator::split(uint64_t jobs, uint64_t from) {
  shard_ = Shard{0, jobs, Shard::kJobsSource, from};
  split_from_.store(from, std::memory_order_relaxed);
  split_jobs_.store(jobs, std::memory_order_release);
  advance_watermark();  // the other jobs' steps are not waited for
}

std::optional<Shard> Aggregator::split_shard() const {
  const uint64_t jobs = split_jobs_.load(std::memory_order_acquire);
  if (jobs == 0) return std::nullopt;
  return Shard{0, jobs, Shard::kJobsSource, split_from_.load(std::memory_order_relaxed)};
}

void Aggregator::advance_watermark() {
  for (;;) {
    if (!ended_above_.empty() && *ended_above_.begin() == watermark_) {
      ended_above_.erase(ended_above_.begin());
      ++watermark_;
    } else if (shard_ && watermark_ < start_.replay_steps && !shard_->has_step(watermark_)) {
      ++watermark_;  // another shard's step
    } else {
      break;
    }
  }
}

void Aggregator::log_step(uint64_t step) {
  nlohmann::ordered_json& lines = step_log_.lines(step);
  for (auto& l : scratch_) lines.push_back(std::move(l));
  scratch_.clear();
}

void Aggregator::cause(CauseEvent&& c) {
  if (journal_) {
    journal_->cause(CauseEvent(c));
    log_step(c.at.step);
  }
  localizing_.reset();
  // The replay localizes the first few batches of each id; parts of a scan run apart
  // (shards, jobs) each localize their own first few: the whole scan's are kept.
  std::vector<std::string> ids;
  for (const auto& id : c.ids) {
    if (localized_[id]++ < kLocalizePerId) ids.push_back(id);
  }
  if (c.root_cause.is_null()) return;
  const StepInfo& at = c.at;
  for (const auto& id : ids) {
    auto it = index_.find(std::make_tuple(id, at.rank ? static_cast<int64_t>(*at.rank) : -1, at.probe ? at.size : 0));
    if (it == index_.end()) continue;
    Finding& f = findings_[it->second];
    // The finding's own is its first localized batch's; each batch keeps its own.
    if (f.root_cause.is_null()) f.root_cause = c.root_cause;
    for (auto& o : f.occurrences) {
      if (o.rank == at.rank && o.batch == at.batch) o.root_cause = c.root_cause;
    }
  }
}

void Aggregator::finish(const ScanEnd& e) {
  finished_ = true;
  end_ = e;
}

void Aggregator::abandon_open_steps() {
  for (const auto& [step, info] : open_) pending_.erase(step);
  open_.clear();
}

std::optional<StepInfo> Aggregator::open_step() const {
  if (open_.empty()) return std::nullopt;
  return open_.rbegin()->second.first;
}

void Aggregator::fail_open_step(const std::string& id, const std::string& message, nlohmann::ordered_json evidence) {
  if (open_.empty()) return;
  auto [step, indices] = open_.rbegin()->second;
  abandon_open_steps();
  RecordEvent r;
  r.at = step;
  r.id = id;
  r.stage = "forward";
  r.message = message;
  r.evidence = std::move(evidence);
  for (std::size_t i = 0; i < indices.size() && r.samples.size() < kSampleCap; ++i) r.samples.push_back(indices[i]);
  r.count = step.size;
  r.batch_indices = indices;
  begin(step, indices);
  record(std::move(r));
  StepEnd e;
  e.step = step.step;
  e.size = step.size;
  end(e);
}

void Aggregator::commit(const RecordEvent& r) {
  const StepInfo& at = r.at;
  auto key = std::make_tuple(r.id, at.rank ? static_cast<int64_t>(*at.rank) : -1, at.probe ? at.size : 0);
  auto it = index_.find(key);
  Finding* f;
  if (it == index_.end()) {
    index_[key] = findings_.size();
    findings_.emplace_back();
    first_batch_.push_back(r.batch_indices);
    f = &findings_.back();
    f->id = r.id;
    f->severity = default_severity(r.id);
    f->rank = at.rank;
    f->batch = at.batch;
    f->probe = at.probe;
    f->probe_size = at.probe ? at.size : 0;
    f->stage = r.stage;
    f->message = r.message;
    f->evidence = r.evidence;
    f->evidence["batch_size"] = at.size;
    f->cuda_equivalent = r.cuda;
  } else {
    f = &findings_[it->second];
  }
  // A finding is per (id, rank, probe size): a new occurrence is a new batch (a probe has one).
  const bool new_batch = f->occurrences_total == 0 || (at.batch && f->batches.back() != *at.batch);
  if (new_batch && at.batch) f->batches.push_back(*at.batch);
  if (new_batch) {
    ++f->occurrences_total;
    if (f->occurrences.size() < kOccurrenceCap) {
      f->occurrences.push_back({at.rank, at.batch, {}, 0, r.evidence.contains("files") ? r.evidence["files"] : nlohmann::ordered_json(),
                                other_cause(r, *f) ? r.message : std::string(), nullptr});
    }
  }
  // This batch's occurrence, unless it fell past the cap.
  Occurrence* occ = f->occurrences.size() == f->occurrences_total ? &f->occurrences.back() : nullptr;
  const bool first = occ && occ == &f->occurrences.front();
  for (int64_t idx : r.samples) {
    if (occ && occ->samples.size() < kSampleCap &&
        std::find(occ->samples.begin(), occ->samples.end(), idx) == occ->samples.end()) {
      occ->samples.push_back(idx);
    }
    // `samples` is the first occurrence's: never merged across batches or ranks.
    if (first && f->samples.size() < kSampleCap && std::find(f->samples.begin(), f->samples.end(), idx) == f->samples.end()) {
      f->samples.push_back(idx);
    }
  }
  if (occ) occ->count += r.count;
  f->count += r.count;
}

void Aggregator::finish_findings() {
  const Geometry g = compute_geometry(loader_spec(cfg_.loader, start_.data.samples));
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
      if (f.probe_size < g.spec.batch_size && !g.recorded()) {
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
  // NaN that came from the model's own weights: each batch's NaN names them.
  const nlohmann::ordered_json cause = model_root_cause(start_.model, cfg_.model.mode);
  for (Finding& f : findings_) {
    if (f.root_cause.is_object() && f.root_cause.value("summary", nlohmann::ordered_json()).is_string()) {
      f.message += "; " + f.root_cause["summary"].get<std::string>();
    }
    if (cause.is_null() || f.id == "model-nonfinite") continue;
    if (f.id == "output-nonfinite" || f.id == "loss-nonfinite" || f.id == "gradient-nonfinite") {
      f.root_cause = cause;
      f.message += "; root cause: " + cause["summary"].get<std::string>();
    }
  }

  FixContext fc;
  fc.geometry = &g;
  fc.loss = cfg_.loss;
  fc.mode = cfg_.model.mode;
  fc.backward = start_.backward;
  fc.output = cfg_.model.output;
  fc.collate_pads = cfg_.loader.collate.pads();
  fc.collate_list = cfg_.loader.collate.list;
  for (std::size_t i = 0; i < findings_.size(); ++i) {
    fc.batch_indices = first_batch_[i];
    if (findings_[i].fixes.empty()) attach_fixes(findings_[i], fc);
  }
  const auto& bn = start_.model.batchnorm_modules;
  for (Finding f : start_.geometry) {
    if (f.id == "tail-batch-singleton" && !bn.empty()) {
      f.message += "; the model has BatchNorm (" + bn.front() +
                   (bn.size() > 1 ? " and " + std::to_string(bn.size() - 1) + " more" : "") + ")";
    }
    findings_.push_back(std::move(f));
  }
}

// A traced archive runs BatchNorm and dropout in the mode it was traced in: say so when
// the scan asks for the other one, since a train-mode failure then cannot show.
void Aggregator::mode_findings() {
  const bool train = cfg_.model.mode == Mode::Train;
  const FrozenModeOps& frozen = train ? start_.model.frozen_eval : start_.model.frozen_train;
  if (frozen.total() == 0) return;
  std::vector<std::string> ops;
  if (frozen.batch_norm) ops.push_back(plural(frozen.batch_norm, "batch_norm op", "batch_norm ops"));
  if (frozen.dropout) ops.push_back(plural(frozen.dropout, "dropout op", "dropout ops"));
  const char* traced_in = train ? "eval" : "train";
  Finding f;
  f.id = "trace-mode-mismatch";
  f.severity = default_severity(f.id);
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

std::string progress_line(uint64_t done, uint64_t total, double elapsed, bool final) {
  done = std::min(done, total);
  const double eta = done ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0;
  const int width = 30;
  const int filled = total ? static_cast<int>(static_cast<double>(width) * static_cast<double>(done) / static_cast<double>(total)) : width;
  std::ostringstream line;
  line << "\r[" << std::string(static_cast<std::size_t>(filled), '#') << std::string(static_cast<std::size_t>(width - filled), '.')
       << "] " << done << "/" << total << " batches";
  if (!final) line << ", ETA " << static_cast<long long>(std::ceil(eta)) << "s ";
  if (final) line << "\n";
  return line.str();
}

void Aggregator::progress(bool final) {
  if (!settings_.progress || settings_.verbosity < 0) return;
  auto now = std::chrono::steady_clock::now();
  if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  // A shard's own share of the steps.
  uint64_t total = start_.replay_steps;
  if (shard_) total = shard_->steps_in(total);
  log_ << progress_line(done_, total, std::chrono::duration<double>(now - t0_).count(), final) << std::flush;
}

ScanResult Aggregator::result(const ScanEnd& end) {
  ScanResult result;
  result.complete = end.complete;
  if (start_.replay_steps) progress(true);
  finish_findings();
  std::stable_sort(findings_.begin(), findings_.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    if (a.probe != b.probe) return !a.probe;
    return false;
  });

  const DatasetInfo& data = start_.data;
  const LoaderSpec spec = loader_spec(cfg_.loader, data.samples);
  const Geometry g = compute_geometry(spec);
  result.findings = findings_;
  result.batches_checked = done_.load();
  result.failed = verdict_fails(findings_, settings_.fail_on);
  nlohmann::ordered_json& r = result.report;
  r["schema_version"] = 1;
  r["tool"] = {{"name", "batchcheck"}, {"version", BATCHCHECK_VERSION}, {"libtorch", start_.libtorch}};
  r["config"] = cfg_.file;
  r["complete"] = result.complete;
  if (end.stopped_at_error) r["stopped_at_first_error"] = true;  // --fail-fast
  r["verdict"] = result.failed ? "fail" : "pass";
  r["fail_on"] = to_string(settings_.fail_on);
  r["device"] = start_.device;
  r["mode"] = to_string(cfg_.model.mode);
  r["sync"] = cfg_.sync;
  r["backward"] = start_.backward;
  auto meta_shape = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.shape) : nlohmann::ordered_json(); };
  auto meta_dtype = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.dtype) : nlohmann::ordered_json(); };
  r["dataset"] = {{"samples", data.samples},
                  {"input_shape", meta_shape(data.input)},
                  {"input_dtype", meta_dtype(data.input)},
                  {"target_shape", meta_shape(data.target)},
                  {"target_dtype", meta_dtype(data.target)}};
  r["geometry"] = {{"batch_size", spec.batch_size},
                   {"drop_last", spec.drop_last},
                   {"sampler", cfg_.loader.order ? "recorded" : to_string(cfg_.loader.sampler)},
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
  if (cfg_.loader.order) r["geometry"]["order"] = cfg_.loader.order->display;
  if (spec.accumulation_steps > 1) {
    r["geometry"]["accumulation_windows"] = g.windows;
    r["geometry"]["last_window_batches"] = g.last_window_batches;
  }
  r["batches"] = {{"checked", done_.load()},
                  {"ranks", start_.ranks},
                  {"first", first_ ? shapes_json(*first_) : nlohmann::ordered_json()},
                  {"last", last_ ? shapes_json(*last_) : nlohmann::ordered_json()}};
  r["series"] = series_.to_json(start_.ranks);
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
  for (const auto& n : extra_notes_) notes.push_back(n);
  if (end.device_lost) {
    notes.push_back("a CUDA device-side assert stopped the scan: the report covers the batches up to it");
  } else if (end.stopped_at_error) {
    notes.push_back("--fail-fast: the scan stopped at its first error, after " + plural(done_.load(), "batch", "batches") +
                    " (the probes and every rank's first and last batch come first); the rest was not checked");
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
  if (settings_.shard) {
    result.partial = make_partial(cfg_, *settings_.shard, start_line_, step_log_, extra_notes_, end);
    result.partial["config"]["edges"] = settings_.edges;
    result.partial["config"]["max_batches"] = cfg_.checks.max_batches;
  }
  SeverityCounts c = count_severities(findings_);
  r["summary"] = {{"errors", c.errors}, {"warnings", c.warnings}, {"infos", c.infos}};
  return result;
}

}  // namespace batchcheck
