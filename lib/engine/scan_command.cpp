#include "engine/scan_command.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/errors.h"
#include "core/journal.h"
#include "core/replay.h"
#include "core/scan.h"
#include "core/info.h"
#include "engine/permutation.h"
#include "engine/torch_backend.h"

namespace batchcheck {

namespace {

std::atomic<int> g_stop{0};

extern "C" void on_signal(int sig) {
  if (g_stop.exchange(sig) != 0) {
    // Second signal: the user insists. No report; exit at once.
    std::_Exit(128 + sig);
  }
}

class SignalScope {
 public:
  explicit SignalScope(bool active) : active_(active) {
    g_stop = 0;
    if (!active_) return;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalScope() {
    if (!active_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  bool active_;
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace

namespace {

BackendOptions backend_options(const ScanCommand& cmd, const Config& cfg) {
  BackendOptions bo;
  bo.device = cfg.device;
  if (cmd.device) {
    bo.device_where = "--device";
  } else {
    bo.device_file = cfg.file;
  }
  bo.mode = cfg.model.mode;
  bo.sync = cfg.sync;
  bo.backward = backward_enabled(cfg);
  bo.threads = cmd.threads;
  return bo;
}

ScanSettings engine_settings(const ScanCommand& cmd) {
  ScanSettings settings = scan_settings(cmd);
  settings.libtorch_version = libtorch_version();
  settings.stop = &g_stop;
  return settings;
}

}  // namespace

ScanOutcome scan_command(const ScanCommand& cmd, std::ostream& out, std::ostream& err) {
  tune_allocator_for_batches();
  // Past `ulimit -f` a write fails with EFBIG (reported, temp file removed) instead of
  // SIGXFSZ killing the process and leaving the temp file behind.
  std::signal(SIGXFSZ, SIG_IGN);
  Config cfg = prepare_scan_config(cmd);
  auto backend = make_torch_backend(cfg, backend_options(cmd, cfg));
  const ScanSettings settings = engine_settings(cmd);
  ScanResult result;
  {
    SignalScope signals(cmd.handle_signals);
    result = run_scan(cfg, settings, *backend, sampler_order, err);
  }
  ScanOutcome outcome;
  outcome.failed = result.failed;
  outcome.complete = result.complete;
  outcome.signal = g_stop.load();
  deliver_report(cmd, result, out, err);
  return outcome;
}

void engine_child(const std::string& request, int event_fd, std::ostream& err) {
  tune_allocator_for_batches();
  const EngineRequest req = decode_request(request);
  const ScanCommand& cmd = req.command;
  JournalWriter journal(event_fd);
  try {
    Config cfg = prepare_scan_config(cmd);
    BackendOptions bo = backend_options(cmd, cfg);
    bo.loading = [&journal](const std::string& file) { journal.loading(file); };
    auto backend = make_torch_backend(cfg, bo);
    const ScanSettings settings = engine_settings(cmd);
    SignalScope signals(cmd.handle_signals);
    replay(cfg, settings, *backend, sampler_order, journal, err, req.resume);
  } catch (const InputError& e) {
    journal.error("input", e.file(), e.where(), e.detail());
  }
}

}  // namespace batchcheck
