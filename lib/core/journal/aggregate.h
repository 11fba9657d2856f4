#pragma once
// The report side of a scan: receives the replay's events (core/scan/scan_events.h), keeps one
// finding per (id, rank, probe size) with its occurrences, and builds the report. A step's
// records count only once the step ends: a step cut short by a crash or a timeout is
// replayed (or reported as the crash) without counting twice. Torch-free: under the
// supervisor it runs in the parent process.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <ostream>
#include <tuple>
#include <vector>

#include "core/config/config.h"
#include "core/journal/step_log.h"
#include "core/plan/geometry.h"
#include "core/report/series.h"
#include "core/scan/scan.h"
#include "core/scan/scan_events.h"

namespace batchcheck {

class JournalWriter;

// "\r[#####.....] 40/131 batches, ETA 3s " (the last one ends the line instead).
std::string progress_line(uint64_t done, uint64_t total, double elapsed_seconds, bool final);

class Aggregator : public ScanSink {
 public:
  Aggregator(const Config& cfg, const ScanSettings& settings, std::ostream& log);
  ~Aggregator() override;

  void start(const ScanStart& s) override;
  void begin(const StepInfo& s, const std::vector<int64_t>& indices) override;
  void record(RecordEvent&& r) override;
  void end(const StepEnd& e) override;
  // begin and end of a step without findings (a part's compact step, core/journal/step_log.h).
  void clean_step(const StepInfo& at, const StepEnd& e);
  void localizing(const StepInfo& s) override { localizing_ = s; }
  void cause(CauseEvent&& c) override;
  void split(uint64_t jobs, uint64_t from) override;
  void finish(const ScanEnd& e) override;

  // A replay that finished because its process lost the CUDA device goes on in another.
  void reopen() {
    finished_ = false;
    end_ = {};
  }
  // Forgets the records of steps that began but did not end (their replay died).
  void abandon_open_steps();
  // The step whose bad value is being localized, if a replay died doing it; forget() it.
  std::optional<StepInfo> localizing() const { return localizing_; }
  void forget_localizing() { localizing_.reset(); }
  // The step that began last and has not ended, if any.
  std::optional<StepInfo> open_step() const;
  // Reports the open step as failed in the replay's process (a crash, a timeout): `id`,
  // `message` and `evidence` as for any finding, on all of the step's samples.
  void fail_open_step(const std::string& id, const std::string& message, nlohmann::ordered_json evidence);
  bool started() const { return started_.load(std::memory_order_acquire); }
  const ScanStart& scan_start() const { return start_; }
  bool finished() const { return finished_; }
  const ScanEnd& end_state() const { return end_; }
  // Where a fresh replay resumes: every step below `watermark` ended, and so did `ended_above`.
  uint64_t watermark() const { return watermark_; }
  const std::set<uint64_t>& ended_above() const { return ended_above_; }
  // Read by another thread too (--jobs' split).
  uint64_t largest_ok_batch() const { return largest_ok_.load(std::memory_order_relaxed); }
  // The share of the steps the replay took when it split (ScanSink::split), for the other
  // jobs and a resumed replay; read by another thread.
  std::optional<Shard> split_shard() const;
  uint64_t steps_total() const { return start_.replay_steps; }
  // Adds a note to the report (e.g. why the scan stopped early).
  void note(const std::string& text) { extra_notes_.push_back(text); }
  const std::vector<std::string>& notes() const { return extra_notes_; }
  // Replay steps ended so far (read by another thread for a progress line).
  uint64_t steps_done() const { return done_.load(std::memory_order_acquire); }
  // A shard's committed journal: the scan's start line, and each ended step's lines.
  const nlohmann::ordered_json& start_line() const { return start_line_; }
  const StepLog& step_log() const { return step_log_; }

  // The report; `end` says whether the scan completed.
  ScanResult result(const ScanEnd& end);

 private:
  void ended(const StepInfo* at, const StepEnd& e);  // `at`: as begun (null: never begun)
  void commit(const RecordEvent& r);
  void advance_watermark();
  void log_step(uint64_t step);
  void finish_findings();
  void mode_findings();
  void progress(bool final = false);

  const Config& cfg_;
  const ScanSettings& settings_;
  std::ostream& log_;
  std::atomic<bool> started_{false};
  bool finished_ = false;
  ScanStart start_;
  ScanEnd end_;
  std::vector<Finding> findings_;
  std::map<std::tuple<std::string, int64_t, uint64_t>, std::size_t> index_;  // (id, rank or -1, probe size)
  std::vector<std::vector<int64_t>> first_batch_;  // per finding: its first batch's indices
  std::map<uint64_t, std::pair<StepInfo, std::vector<int64_t>>> open_;  // steps begun, not ended, with their indices
  std::map<uint64_t, std::vector<RecordEvent>> pending_;  // their records
  std::optional<Shard> shard_;                    // the replay's share (settings_.shard, then its split)
  std::atomic<uint64_t> split_jobs_{0}, split_from_{0};
  uint64_t watermark_ = 0;                        // every step below it ended
  std::set<uint64_t> ended_above_;                // steps at or above it that ended
  std::atomic<uint64_t> done_{0};                 // replay steps ended
  std::atomic<uint64_t> largest_ok_{0};
  std::optional<BatchShapes> first_, last_;
  uint64_t first_step_ = 0, last_step_ = 0;
  std::optional<StepInfo> localizing_;
  // Replayed batches by (rank, batch): whether forward, the loss and backward ran without an
  // error finding (a last batch of one that ran clean is information, not a warning).
  std::map<std::pair<uint64_t, uint64_t>, bool> ran_clean_;
  std::map<std::string, unsigned> localized_;  // batches localized per finding id
  // A shard's scan: the committed journal, per step, for its partial report.
  std::vector<nlohmann::ordered_json> scratch_;
  std::unique_ptr<JournalWriter> journal_;
  nlohmann::ordered_json start_line_;
  StepLog step_log_;
  Series series_;  // per-batch statistics for the report's plots
  std::vector<std::string> extra_notes_;
  std::chrono::steady_clock::time_point t0_, last_draw_;
};

}  // namespace batchcheck
