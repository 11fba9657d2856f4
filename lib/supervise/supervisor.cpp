#include "supervise/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "core/base/errors.h"
#include "core/base/log.h"
#include "core/base/text.h"
#include "core/journal/aggregate.h"
#include "core/journal/journal.h"
#include "core/report/catalog.h"
#include "supervise/cuda_preload.h"
#include "supervise/drive.h"

namespace batchcheck {

namespace {

// How long the watcher lets journal lines gather between reads (the child's pipe holds what
// a nap gathers: engine_child.cpp).
constexpr int kJournalNapMs = 10;

using Clock = std::chrono::steady_clock;

// SIGINT/SIGTERM reach the poll loop through a pipe; a second one ends the process at once.
int g_sig_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signal = 0;
// Each job's engine child (--jobs), for the second signal and for measuring.
volatile pid_t g_children[kMaxJobs] = {};
std::atomic<bool> g_abort{false};  // a job failed: every other job stops

extern "C" void on_parent_signal(int sig) {
  if (g_signal != 0) {
    for (std::size_t k = 0; k < kMaxJobs; ++k) {
      if (g_children[k] > 0) ::kill(g_children[k], SIGKILL);
    }
    std::_Exit(128 + sig);
  }
  g_signal = sig;
  const char c = 1;
  [[maybe_unused]] ssize_t n = ::write(g_sig_pipe[1], &c, 1);
}

class ParentSignals {
 public:
  explicit ParentSignals(bool active) : active_(active) {
    g_signal = 0;
    g_abort = false;
    if (::pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe: " + std::string(std::strerror(errno)));
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    // A child that dies while the request is written, or stdout that is a closed pipe:
    // an error to report, not a signal that kills the gate.
    sigaction(SIGPIPE, &ign, &old_pipe_);
    // Past `ulimit -f` a write fails with EFBIG (reported, temp file removed).
    sigaction(SIGXFSZ, &ign, &old_xfsz_);
    if (!active_) return;
    struct sigaction sa {};
    sa.sa_handler = on_parent_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~ParentSignals() {
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    sigaction(SIGXFSZ, &old_xfsz_, nullptr);
    if (active_) {
      sigaction(SIGINT, &old_int_, nullptr);
      sigaction(SIGTERM, &old_term_, nullptr);
    }
    ::close(g_sig_pipe[0]);
    ::close(g_sig_pipe[1]);
    g_sig_pipe[0] = g_sig_pipe[1] = -1;
  }

 private:
  bool active_;
  struct sigaction old_int_ {}, old_term_ {}, old_pipe_ {}, old_xfsz_ {};
};

// How one child ended.
struct Ending {
  int status = 0;
  bool timed_out = false;
  bool stopped = false;  // killed after a stop request outlived the grace period
  std::optional<JournalLine> error;
  std::string loading;  // the input file it was reading last, before the scan started
};

// --batch-timeout, or the automatic limit: what the watcher enforces and the finding says.
double batch_limit(const ScanCommand& cmd, double slowest) {
  return cmd.batch_timeout ? *cmd.batch_timeout : std::max(kTimeoutFloorSeconds, kTimeoutFactor * slowest);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Feeds the child's journal to the aggregator until the child exits.
Ending watch(EngineChild child, Aggregator& agg, const ScanCommand& cmd, const SupervisorOptions& opt, double& slowest,
             std::size_t slot) {
  Ending end;
  g_children[slot] = child.pid;
  std::string buffer;
  std::vector<char> chunk(1 << 16);  // on the heap: `ulimit -s` may be small
  Clock::time_point last_event = Clock::now();
  std::optional<Clock::time_point> stop_deadline;
  bool eof = false;
  while (!eof) {
    double limit = 0;  // no limit
    if (agg.started() && (agg.open_step() || agg.localizing())) {
      limit = batch_limit(cmd, slowest);
    }
    int wait_ms = 200;  // other jobs' threads may have drained the signal pipe
    if (limit > 0) wait_ms = static_cast<int>(std::clamp((limit - seconds_since(last_event)) * 1000 + 1, 1.0, 1000.0));
    if (stop_deadline) wait_ms = std::min(wait_ms, 50);
    pollfd fds[2] = {{child.events, POLLIN, 0}, {g_sig_pipe[0], POLLIN, 0}};
    int n = ::poll(fds, 2, wait_ms);
    if (n < 0 && errno != EINTR) break;
    if (n > 0 && (fds[1].revents & POLLIN)) {
      char drain[16];
      while (::read(g_sig_pipe[0], drain, sizeof drain) > 0) {
      }
    }
    if (g_signal && !stop_deadline) {
      // The child stops after its current batch; one that is stuck is killed after the grace period.
      ::kill(child.pid, SIGINT);
      stop_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.grace_seconds));
    }
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t got = ::read(child.events, chunk.data(), chunk.size());
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        eof = true;
      } else {
        buffer.append(chunk.data(), static_cast<std::size_t>(got));
        std::size_t pos;
        while ((pos = buffer.find('\n')) != std::string::npos) {
          const bool was_started = agg.started();
          JournalLine line = apply_journal_line(buffer.substr(0, pos), agg);
          buffer.erase(0, pos + 1);
          if (line.kind == JournalLine::Kind::Loading) end.loading = line.file;
          if (line.kind == JournalLine::Kind::Error) end.error = line;
          // The wait for the first batch includes warming up: it does not set the pace.
          if (was_started && agg.started()) slowest = std::max(slowest, seconds_since(last_event));
          last_event = Clock::now();
        }
        // Nap before the next read, so that a scan of small batches wakes this thread once
        // per nap instead of twice per batch: on a machine whose cores all run jobs, every
        // wake-up is taken from a job. The child's exit (the pipe's hang-up) or a signal
        // ends the nap at once; the lines wait in the pipe.
        // Not after a full read (more is waiting), nor with a line half read (its end is coming).
        if (!g_signal && !stop_deadline && static_cast<std::size_t>(got) < chunk.size() && buffer.empty()) {
          int nap_ms = kJournalNapMs;
          if (limit > 0) nap_ms = static_cast<int>(std::clamp((limit - seconds_since(last_event)) * 1000, 0.0, double(nap_ms)));
          pollfd nap[2] = {{child.events, 0, 0}, {g_sig_pipe[0], POLLIN, 0}};
          if (nap_ms > 0) ::poll(nap, 2, nap_ms);
        }
      }
    }
    if (g_abort && !end.stopped) {
      ::kill(child.pid, SIGKILL);
      end.stopped = true;
    }
    if (stop_deadline && Clock::now() >= *stop_deadline) {
      ::kill(child.pid, SIGKILL);
      end.stopped = true;
      stop_deadline = Clock::time_point::max();
    }
    pollfd waiting{child.events, POLLIN, 0};  // a line that came in time is read before the verdict
    if (!eof && !end.stopped && limit > 0 && seconds_since(last_event) >= limit &&
        (agg.open_step() || agg.localizing()) && !(::poll(&waiting, 1, 0) > 0 && (waiting.revents & POLLIN))) {
      ::kill(child.pid, SIGKILL);
      end.timed_out = true;
      eof = true;
    }
  }
  ::close(child.events);
  while (::waitpid(child.pid, &end.status, 0) < 0 && errno == EINTR) {
  }
  if (child.output) child.output->finish();  // its last words before the verdict on it
  g_children[slot] = 0;
  return end;
}

std::string seconds_text(double s) {
  return format_number(s) + (s == 1 ? " second" : " seconds");
}

}  // namespace

pid_t job_child(std::size_t slot) { return g_children[slot]; }

void abort_jobs() { g_abort = true; }
int stop_signal() { return g_signal; }

DriveResult drive(const ScanCommand& cmd, const Config& cfg, Aggregator& agg, const SupervisorOptions& opt,
                  EngineRequest& request, std::size_t slot, EngineChild started) {
  DriveResult out;
  double slowest = 0;
  unsigned failures_in_a_row = 0;
  uint64_t last_watermark = agg.watermark();
  for (;;) {
    EngineChild child = started.pid > 0 ? started : start_engine_child(opt);
    started = {};
    send_request(child, encode_request(request));
    Ending e = watch(child, agg, cmd, opt, slowest, slot);
    // A replay that split (--jobs auto) resumes, and counts its crashes, with its share.
    if (const std::optional<Shard> s = agg.split_shard()) request.command.shard = *s;
    if (e.error) {
      if (e.error->error_kind == "input") throw InputError(e.error->file, e.error->where, e.error->what);
      throw std::runtime_error(e.error->what);
    }
    if (g_abort || g_signal) {
      // Another job failed, or SIGINT/SIGTERM: the steps that ended stand, the open one does not.
      out.loaded = agg.started();
      agg.abandon_open_steps();
      out.end.complete = false;
      return out;
    }
    const bool device_lost = agg.finished() && !e.timed_out && agg.end_state().device_lost && !agg.end_state().stopped_at_error;
    if (agg.finished() && !e.timed_out && !device_lost) {
      out.end = agg.end_state();
      return out;
    }
    const bool crashed = WIFSIGNALED(e.status) && !e.timed_out;
    const std::string how = e.timed_out ? "" : crashed ? describe_signal(WTERMSIG(e.status))
                                                       : "exit status " + std::to_string(WEXITSTATUS(e.status));
    if (!agg.started()) {
      if (e.timed_out) throw InternalError("timeout before the scan started");
      if (!e.loading.empty() && crashed) {
        const int sig = WTERMSIG(e.status);
        const char* writer = e.loading != cfg.model.path                ? "torch.save"
                             : cfg.model.format == ModelFormat::Pt2 ? "torch._inductor.aoti_compile_and_package"
                                                                     : "torch.jit.save";
        if (sig == SIGKILL) {
          throw InputError(e.loading, "", "the process was killed (SIGKILL) while LibTorch read this file: out of memory?");
        }
        const std::string limits = limits_note();
        throw InputError(e.loading, "",
                         "LibTorch crashed reading this file (" + how.substr(0, how.find(' ')) +
                             (limits.empty() ? "): the file is corrupt or was not written by " + std::string(writer)
                                             : ")" + limits));
      }
      if (const std::string limits = limits_note(); !limits.empty()) {
        throw InputError("", "", "the scan engine died while starting (" + how + ")" + limits);
      }
      throw std::runtime_error("the scan engine ended before the scan started (" + how + ")");
    }
    if (const std::optional<StepInfo> loc = agg.localizing()) {
      // The localizer died, not the batch: the batch's findings stand without their root
      // cause, and the rest of the scan goes on without localizing.
      agg.forget_localizing();
      agg.abandon_open_steps();
      const std::string which = loc->probe ? "the probe batch of " + plural(loc->size, "sample")
                                           : "batch " + std::to_string(loc->batch.value_or(0));
      agg.note("localizing the root cause of " + which + " " +
               (e.timed_out ? "ran longer than the batch timeout" : "crashed the scan engine (" + how + ")") +
               ": the scan went on without root causes");
      request.resume.start_step = agg.watermark();
      request.resume.skip = agg.ended_above();
      request.resume.largest_ok_batch = agg.largest_ok_batch();
      request.resume.localize = false;
      continue;
    }
    const std::optional<StepInfo> step = agg.open_step();
    if (device_lost) {
      // A device-side assert ended its batch (its finding stands) and left that process's CUDA
      // context unusable (PyTorch cannot recover one): a fresh process goes on after it.
      agg.reopen();
    } else if (!step) {
      // Between batches (resetting the model for the next rank): nothing to attribute it to.
      agg.note("the scan engine ended between batches (" + how + "): the report covers the batches before it");
      out.end.complete = false;
      return out;
    } else {
      const std::string where = step->probe ? "the probe batch of " + plural(step->size, "sample")
                                            : "batch " + std::to_string(*step->batch) + " (" + plural(step->size, "sample") + ")";
      if (e.timed_out) {
        const double limit = batch_limit(cmd, slowest);
        agg.fail_open_step("forward-timeout",
                           where + " ran longer than the batch timeout of " + seconds_text(limit) +
                               ": forward, loss or backward never finished (an endless loop or a deadlock in the model?); "
                               "batchcheck stopped it and went on after this batch (--batch-timeout sets the limit)",
                           {{"timeout_seconds", limit}});
      } else {
        agg.fail_open_step("forward-crash",
                           "the process crashed with " + how + " while checking " + where +
                               " (forward, loss or backward, inside LibTorch or the model's own code): training dies "
                               "here the same way; batchcheck went on in a fresh process after this batch",
                           {{"signal", crashed ? how.substr(0, how.find(' ')) : how}});
      }
      if (cmd.fail_fast && fails(default_severity("forward-crash"), cmd.fail_on)) {
        // The crash is the first error: a fresh child would go on past it.
        out.end.complete = false;
        out.end.stopped_at_error = true;
        return out;
      }
    }
    // Consecutive steps of this process: a shard's are `count` apart (a split job's since it split).
    const uint64_t stride = request.command.shard ? request.command.shard->count : 1;
    failures_in_a_row = agg.watermark() > last_watermark + stride ? 1 : failures_in_a_row + 1;
    last_watermark = agg.watermark();
    if (failures_in_a_row >= opt.max_consecutive_failures) {
      agg.note(std::to_string(failures_in_a_row) + " batches in a row crashed, timed out or lost the CUDA device: the scan "
               "stopped there" + (device_lost ? " (--device cpu checks every batch in one process)" : ""));
      out.end.complete = false;
      out.end.device_lost = device_lost;
      return out;
    }
    request.resume.start_step = agg.watermark();
    request.resume.skip = agg.ended_above();
    request.resume.largest_ok_batch = agg.largest_ok_batch();
  }

}

ScanOutcome supervise_scan(const ScanCommand& cmd, std::ostream& out, std::ostream& err, const SupervisorOptions& given) {
  ParentSignals signals(cmd.handle_signals);
  const Config cfg = prepare_scan_config(cmd);
  SupervisorOptions opt = given;
  if (opt.env.empty() && !opt.module.empty()) opt.env = engine_environment(cfg.device, opt.module);
  if (!cmd.jobs || *cmd.jobs > 1) {
    if (!cmd.shard) return run_jobs(cmd, cfg, out, err, opt);
  }
  ScanCommand child_cmd = cmd;
  child_cmd.progress = false;  // the parent draws it: it outlives any one child
  const ScanSettings settings = scan_settings(cmd);
  Aggregator agg(cfg, settings, err);
  EngineRequest request;
  request.command = child_cmd;
  DriveResult r = drive(cmd, cfg, agg, opt, request, 0);
  if (!r.loaded) {
    log_warn("interrupted while loading the model and the data: no report");
    ScanOutcome o;
    o.complete = false;
    o.report_written = false;
    o.signal = g_signal;
    return o;
  }
  ScanResult result = agg.result(r.end);
  ScanOutcome outcome;
  outcome.failed = result.failed;
  outcome.complete = result.complete;
  outcome.signal = g_signal;
  deliver_report(cmd, result, out, err);
  return outcome;
}

}  // namespace batchcheck
