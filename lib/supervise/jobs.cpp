// `scan --jobs J` and its default: engine children side by side, each replaying every J-th
// step with its share of the intra-op threads (core/journal/jobs.h decides the default from the
// first job's measured steps), their committed journals merged in step order into the
// report one child would have written (core/journal/shard.h's join_steps, as `merge` does).
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "core/base/errors.h"
#include "core/base/log.h"
#include "core/journal/jobs.h"
#include "core/journal/shard.h"
#include "supervise/drive.h"

namespace batchcheck {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<uint64_t>(CPU_COUNT(&set));
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<uint64_t>(n) : 1;
}

// A "Key:   N kB" line of a /proc file, in bytes (0 if absent).
uint64_t proc_kb(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) << 10;
  }
  return 0;
}

uint64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(n);
}

struct Job {
  ScanCommand cmd;
  ScanSettings settings;
  std::ostringstream log;  // a job's own progress and verbose lines: the parent draws the whole
  std::unique_ptr<Aggregator> agg;
  EngineRequest request;
  DriveResult result;
  std::exception_ptr error;
  std::thread thread;
  std::atomic<bool> done{false};
};

class Jobs {
 public:
  Jobs(const ScanCommand& cmd, const Config& cfg, std::ostream& err, const SupervisorOptions& opt)
      : cmd_(cmd), cfg_(cfg), err_(err), opt_(opt), threads_(cmd.threads ? *cmd.threads : usable_cores()),
        max_jobs_(auto_max_jobs(threads_, file_bytes(cfg.model.path), proc_kb("/proc/meminfo", "MemAvailable"))) {}
  ~Jobs() {
    discard_engine_child(standby_);
    abort_jobs_if_running();
    for (auto& j : jobs_) {
      if (j && j->thread.joinable()) j->thread.join();
    }
  }

  ScanOutcome run(std::ostream& out);

 private:
  void start(std::size_t k, uint64_t count, uint64_t from, const ReplayResume& resume, EngineChild child = {});
  void wait_and_measure();
  void measure(Clock::time_point now);
  bool start_split_jobs();
  void draw(bool final);
  void abort_jobs_if_running() {
    for (auto& j : jobs_) {
      if (j && !j->done) abort_jobs();
    }
  }

  const ScanCommand& cmd_;
  const Config& cfg_;
  std::ostream& err_;
  const SupervisorOptions& opt_;
  const uint64_t threads_, max_jobs_;
  std::vector<std::unique_ptr<Job>> jobs_;
  Clock::time_point t0_ = Clock::now(), last_draw_;
  // The measured default: job 0 alone, measured from its first ended step.
  bool deciding_ = false;
  bool split_asked_ = false;
  pid_t asked_pid_ = 0;
  // While the default decides: the second job's engine, loading LibTorch on a core the first
  // job leaves free, so that a split costs the model's loading only.
  EngineChild standby_;
  std::optional<Clock::time_point> first_at_;
  uint64_t first_done_ = 0;
  pid_t first_pid_ = 0;
  // The last job to end wakes the main thread: the scan's end is not a poll period late.
  std::mutex wake_mu_;
  std::condition_variable wake_;
};

void Jobs::start(std::size_t k, uint64_t count, uint64_t from, const ReplayResume& resume, EngineChild child) {
  if (!jobs_[k]) jobs_[k] = std::make_unique<Job>();
  Job& j = *jobs_[k];
  j.cmd = cmd_;
  j.cmd.progress = false;
  j.cmd.shard = Shard{k, count, Shard::kJobsSource, from};
  j.cmd.output_path.reset();  // the parent writes the report and its views
  j.cmd.views = {};
  // Every process of a scan has the same share, whatever the default decides.
  j.cmd.threads = threads_per_job(threads_, cmd_.jobs ? count : max_jobs_);
  j.settings = scan_settings(j.cmd);
  j.settings.progress = false;
  j.agg = std::make_unique<Aggregator>(cfg_, j.settings, j.log);
  j.request.command = j.cmd;
  j.request.resume = resume;
  j.done = false;
  j.thread = std::thread([this, &j, k, child] {
    try {
      j.result = drive(j.cmd, cfg_, *j.agg, opt_, j.request, k, child);
    } catch (...) {
      j.error = std::current_exception();
      abort_jobs();
    }
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      j.done = true;
    }
    wake_.notify_all();
  });
}

void Jobs::measure(Clock::time_point now) {
  Job& j0 = *jobs_[0];
  const pid_t pid = job_child(0);
  const uint64_t done = j0.agg->steps_done();
  if (pid <= 0 || done == 0) return;
  if (!first_at_ || pid != first_pid_) {  // a fresh child (after a crash) starts the measure again
    first_at_ = now;
    first_pid_ = pid;
    first_done_ = done;
    return;
  }
  const double wall = std::chrono::duration<double>(now - *first_at_).count();
  // A tenth of a second of steps measures them well enough: one long step (a transformer's
  // batch) decides at once, instead of three more on the first job's share of the threads.
  if (done == first_done_ || wall < 0.1) return;
  deciding_ = false;
  JobsMeasure m;
  m.cpu = j0.agg->scan_start().device == "cpu";
  m.max_jobs = max_jobs_;
  m.startup_seconds = std::chrono::duration<double>(*first_at_ - t0_).count();
  m.step_seconds = wall / static_cast<double>(done - first_done_);
  const uint64_t total = j0.agg->steps_total();
  m.remaining_steps = total > done ? total - done : 0;
  m.rss_bytes = proc_kb("/proc/" + std::to_string(pid) + "/status", "VmRSS");
  m.available_bytes = proc_kb("/proc/meminfo", "MemAvailable");
  const JobsDecision d = decide_jobs(m);
  log_debug("batchcheck: --jobs auto: " + d.why);
  if (d.jobs < 2) {
    discard_engine_child(standby_);
    return;
  }
  // Job 0 goes on without a pause: between two steps it takes every J-th step from the next
  // multiple of J and says where (a "split" journal line); the other jobs start there.
  union sigval v {};
  v.sival_int = static_cast<int>(d.jobs);
  if (::sigqueue(pid, SIGUSR1, v) == 0) {
    split_asked_ = true;
    asked_pid_ = pid;
  } else {
    discard_engine_child(standby_);
  }
}

bool Jobs::start_split_jobs() {
  if (!split_asked_ || jobs_.size() > 1) return false;
  const std::optional<Shard> s = jobs_[0]->agg->split_shard();
  if (!s || jobs_[0]->error) {
    // The child asked died before it split (its successor goes on alone), or job 0 failed.
    if (!s && job_child(0) != asked_pid_) discard_engine_child(standby_);
    return false;
  }
  // Job 0 takes only its share now: the others must run, however many it says.
  if (s->count > kMaxJobs) throw InternalError("job 0 split into " + std::to_string(s->count) + " jobs");
  ReplayResume resume;
  resume.start_step = s->from;  // every step below is job 0's
  resume.largest_ok_batch = jobs_[0]->agg->largest_ok_batch();
  jobs_.resize(s->count);
  for (std::size_t k = 1; k < s->count; ++k) {
    EngineChild child;
    if (k == 1 && standby_.pid > 0) {
      // One that died idle (the OOM killer) is replaced by a fresh child.
      if (engine_child_alive(standby_)) child = standby_;
      else discard_engine_child(standby_);
      standby_ = {};
    }
    start(k, s->count, s->from, resume, child);
  }
  return true;
}

void Jobs::draw(bool final) {
  if (!cmd_.progress || cmd_.quiet) return;
  const auto now = Clock::now();
  if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  uint64_t done = 0, total = 0;
  for (const auto& j : jobs_) {
    if (!j) continue;
    done += j->agg->steps_done();
    if (j->agg->steps_done() > 0) total = j->agg->steps_total();
  }
  if (total == 0) return;
  err_ << progress_line(done, total, std::chrono::duration<double>(now - t0_).count(), final) << std::flush;
}

void Jobs::wait_and_measure() {
  for (;;) {
    bool all_done = true;
    for (const auto& j : jobs_) all_done = all_done && j->done;
    // After the snapshot: a job 0 that split and ended at once still gets its other jobs.
    if (!stop_signal() && start_split_jobs()) continue;
    if (all_done) {
      discard_engine_child(standby_);  // the scan ended before the default decided
      return;
    }
    {
      // Waiting for job 0's split line, the other jobs' start is on the critical path: look often.
      // While the default measures, too: its step times are read at these wake-ups, and one
      // 0.1 s step read 50 ms late would be half again as long.
      const auto period = std::chrono::milliseconds(split_asked_ && jobs_.size() == 1 ? 5 : deciding_ ? 10 : 50);
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_.wait_for(lock, period, [this] {
        return std::all_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j->done.load(); });
      });
    }
    if (deciding_) measure(Clock::now());
    draw(false);
  }
}

ScanOutcome Jobs::run(std::ostream& out) {
  const uint64_t count = cmd_.jobs ? std::min<uint64_t>(*cmd_.jobs, kMaxJobs) : 1;
  deciding_ = !cmd_.jobs && !cmd_.fail_fast;  // failing fast is about the first batches: one job
  jobs_.resize(count);
  for (std::size_t k = 0; k < count; ++k) start(k, count, 0, {});
  // Not for a GPU scan, which stays one job (its device is known once the first job started).
  if (deciding_ && max_jobs_ > 1 && cfg_.device == "cpu") standby_ = start_engine_child(opt_);
  wait_and_measure();
  for (auto& j : jobs_) j->thread.join();
  for (auto& j : jobs_) {
    if (j->error) std::rethrow_exception(j->error);
  }
  ScanOutcome outcome;
  outcome.signal = stop_signal();
  const Job* first = nullptr;
  for (const auto& j : jobs_) {
    if (j->agg->started()) {
      first = j.get();
      break;
    }
  }
  if (!first) {
    log_warn("interrupted while loading the model and the data: no report");
    outcome.complete = false;
    outcome.report_written = false;
    return outcome;
  }
  // The whole scan: every job's committed steps in step order, as one child would tell them.
  const std::string from = Shard::kJobsSource;
  JoinedSteps steps;
  std::vector<std::string> notes;
  ScanEnd end;
  for (const auto& j : jobs_) {
    for (const auto& [step, lines] : j->agg->step_log().lines()) steps.emplace_back(step, StepLines{&lines, &from, nullptr});
    for (const auto& [step, clean] : j->agg->step_log().cleans()) steps.emplace_back(step, StepLines{nullptr, &from, &clean});
    for (const auto& n : j->agg->notes()) {
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
    }
    end.complete = end.complete && j->agg->started() && j->result.end.complete;
    end.device_lost = end.device_lost || j->result.end.device_lost;
    end.stopped_at_error = end.stopped_at_error || j->result.end.stopped_at_error;
  }
  // Each step once, the first job's that committed it.
  std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  steps.erase(std::unique(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first == b.first; }), steps.end());
  draw(true);
  ScanSettings settings = scan_settings(cmd_);
  settings.progress = false;
  Aggregator agg(cfg_, settings, err_);
  ScanResult result = join_steps(agg, first->agg->start_line(), from, steps, notes, end);
  outcome.failed = result.failed;
  outcome.complete = result.complete;
  deliver_report(cmd_, result, out, err_);
  return outcome;
}

}  // namespace

ScanOutcome run_jobs(const ScanCommand& cmd, const Config& cfg, std::ostream& out, std::ostream& err,
                     const SupervisorOptions& opt) {
  Jobs jobs(cmd, cfg, err, opt);
  return jobs.run(out);
}

}  // namespace batchcheck
