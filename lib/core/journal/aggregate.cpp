#include "core/journal/aggregate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/base/text.h"
#include "core/findings/findings.h"
#include "core/journal/journal.h"
#include "core/pipeline/forward_stage.h"
#include "core/pipeline/localize_stage.h"
#include "core/pipeline/model_findings.h"
#include "core/report/catalog.h"

namespace batchcheck {

namespace {



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
  auto differs = [&](const char* key) { return r.evidence.contains(key) && f.evidence.contains(key) && r.evidence[key] != f.evidence[key]; };
  // The same error with other indices (another token id past the table) is told too.
  return differs("error") || differs("index_fault") || differs("peak");
}

// half-headroom is about the largest value of the scan: the batch that holds it leads the finding.
bool leads(const RecordEvent& r, const Finding& f) {
  return r.id == "half-headroom" && r.evidence.value("peak", 0.0) > f.evidence.value("peak", 0.0);
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
  // batchcheck.scan()'s model.pt is its own temporary copy: the user knows the model they gave.
  if (auto f = model_nonfinite_finding(s.model, cfg_.source.empty() ? cfg_.model.path : "the model given to batchcheck.scan()")) {
    findings_.push_back(std::move(*f));
    first_batch_.emplace_back();
  }
  started_.store(true, std::memory_order_release);  // start_ is complete: scan_start() may be read
}

void Aggregator::begin(const StepInfo& s, const std::vector<int64_t>& indices) { open_[s.step] = {s, indices}; }

void Aggregator::record(RecordEvent&& r) { pending_[r.at.step].push_back(std::move(r)); }

void Aggregator::end(const StepEnd& e) {
  // A search inside the step (a failed forward's samples) ended with it.
  if (localizing_ && localizing_->step == e.step) localizing_.reset();
  auto open = open_.find(e.step);
  ended(open == open_.end() ? nullptr : &open->second.first, e);
  if (open != open_.end()) open_.erase(open);
}

void Aggregator::clean_step(const StepInfo& at, const StepEnd& e) { ended(&at, e); }

void Aggregator::ended(const StepInfo* at, const StepEnd& e) {
  if (journal_) {
    // A part of a scan keeps each step's committed journal for joining (core/journal/step_log.h).
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
          if (again->id == r.id && r.id != "hardcoded-batch-size") {
            // The same finding: its message (what the process that ran it added: the samples, the
            // BatchNorm layer) stands; only the scan's largest batch is the whole scan's.
            r.evidence = again->evidence;
          } else {
            r.id = again->id;
            r.message = again->message;
            r.evidence = again->evidence;
          }
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
  if (at && !probe && at->batch) {
    ran_clean_[{at->rank.value_or(0), *at->batch}] = e.forward_ok && !(worst && *worst >= Severity::Error);
  }
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
  bool led = false;
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
    if (leads(r, *f)) {
      // The batch that holds the scan's largest value leads: its message, evidence, batch and
      // samples; each occurrence keeps its own message (the first's is put in its occurrence).
      if (!f->occurrences.empty() && f->occurrences.front().message.empty()) f->occurrences.front().message = f->message;
      f->batch = at.batch;
      f->message = r.message;
      f->evidence = r.evidence;
      f->evidence["batch_size"] = at.size;
      f->samples.clear();
      for (int64_t idx : r.samples) {
        if (f->samples.size() < kSampleCap) f->samples.push_back(idx);
      }
      first_batch_[it->second] = r.batch_indices;
      led = true;
    }
  }
  // A finding is per (id, rank, probe size): a new occurrence is a new batch (a probe has one).
  const bool new_batch = f->occurrences_total == 0 || (at.batch && f->batches.back() != *at.batch);
  if (new_batch && at.batch) f->batches.push_back(*at.batch);
  if (new_batch) {
    ++f->occurrences_total;
    if (f->occurrences.size() < kOccurrenceCap) {
      f->occurrences.push_back({at.rank, at.batch, {}, 0, r.evidence.contains("files") ? r.evidence["files"] : nlohmann::ordered_json(),
                                led || other_cause(r, *f) ? r.message : std::string(), nullptr});
    }
  }
  // This batch's occurrence, unless it fell past the cap.
  Occurrence* occ = f->occurrences.size() == f->occurrences_total ? &f->occurrences.back() : nullptr;
  const bool first = occ && occ == &f->occurrences.front() && !led;
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
  if (!settings_.progress || settings_.quiet) return;
  auto now = std::chrono::steady_clock::now();
  if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  // A shard's own share of the steps.
  uint64_t total = start_.replay_steps;
  if (shard_) total = shard_->steps_in(total);
  log_ << progress_line(done_, total, std::chrono::duration<double>(now - t0_).count(), final) << std::flush;
}

}  // namespace batchcheck
