#include "engine/scan_command.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <unistd.h>

#include <utility>
#include <vector>

#include "core/base/allocator.h"
#include "core/base/errors.h"
#include "core/base/info.h"
#include "core/command/run_scan.h"
#include "core/findings/error_text.h"
#include "core/journal/journal.h"
#include "core/pipeline/classify.h"
#include "core/pipeline/forward_stage.h"
#include "core/scan/replay.h"
#include "engine/data/permutation.h"
#include "engine/torch_backend.h"

#include <c10/util/Logging.h>

namespace batchcheck {

namespace {

std::atomic<int> g_stop{0};
std::atomic<int> g_split{0};  // --jobs auto: go on as job 0 of this many (the supervisor's sigqueue)

extern "C" void on_signal(int sig) {
  if (g_stop.exchange(sig) != 0) {
    // Second signal: the user insists. No report; exit at once.
    std::_Exit(128 + sig);
  }
}

extern "C" void on_split(int, siginfo_t* info, void*) { g_split = info->si_value.sival_int; }

class SignalScope {
 public:
  // `job`: a --jobs child, which the supervisor may ask to split (SIGUSR1 with the count).
  SignalScope(bool active, bool job) : active_(active), job_(job) {
    g_stop = 0;
    g_split = 0;
    if (!active_) return;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    if (job_) {
      struct sigaction su {};
      su.sa_sigaction = on_split;
      su.sa_flags = SA_SIGINFO | SA_RESTART;  // it comes mid-scan: no system call fails of it
      sigemptyset(&su.sa_mask);
      sigaction(SIGUSR1, &su, &old_usr1_);
    }
  }
  ~SignalScope() {
    if (!active_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    if (job_) sigaction(SIGUSR1, &old_usr1_, nullptr);
  }

 private:
  bool active_, job_;
  struct sigaction old_int_ {}, old_term_ {}, old_usr1_ {};
};

bool is_job(const ScanCommand& cmd) { return cmd.shard && cmd.shard->job(); }

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
  bo.shared_process = cmd.shared_process;
  return bo;
}

ScanSettings engine_settings(const ScanCommand& cmd) {
  ScanSettings settings = scan_settings(cmd);
  settings.libtorch_version = libtorch_version();
  settings.stop = &g_stop;
  if (is_job(cmd)) settings.split = &g_split;
  return settings;
}

}  // namespace

ScanOutcome scan_command(const ScanCommand& cmd, std::ostream& out, std::ostream& err) {
  if (!cmd.shared_process) {
    tune_allocator_for_batches();
    // Past `ulimit -f` a write fails with EFBIG (reported, temp file removed) instead of
    // SIGXFSZ killing the process and leaving the temp file behind.
    std::signal(SIGXFSZ, SIG_IGN);
  }
  Config cfg = prepare_scan_config(cmd);
  auto backend = make_torch_backend(cfg, backend_options(cmd, cfg));
  const ScanSettings settings = engine_settings(cmd);
  ScanResult result;
  {
    SignalScope signals(cmd.handle_signals, is_job(cmd));
    result = run_scan(cfg, settings, *backend, sampler_order, err);
  }
  ScanOutcome outcome;
  outcome.failed = result.failed;
  outcome.complete = result.complete;
  outcome.signal = g_stop.load();
  deliver_report(cmd, result, out, err);
  return outcome;
}

namespace {

// BATCHCHECK_TEST_FAULT, for the supervisor's tests: "load:SIG" dies of signal SIG while
// loading the inputs, "step:N:SIG" when step N begins, "from:N:SIG" when any step from N on
// begins, "localize:SIG" when root-cause localization starts (SIG: SEGV, ABRT, KILL, BUS, FPE). A real
// death by that signal: what the supervisor sees is what a crash inside LibTorch gives.
// "log:" logs a warning and an error through LibTorch's own logging (glog or c10's).
// "maps:" says on stderr which of LibTorch's CUDA libraries the child has mapped before the
// model loads (supervise/cuda_preload.h: a CUDA scan has them from its start, a CPU scan none).
// "cuda-assert:" makes the CPU behave as CUDA does on a kernel's assertion
// (BackendOptions::simulate_device_asserts): the supervisor's resume after it, on any machine.
struct TestFault {
  std::string where;  // "load", "step", "from" or "localize"
  uint64_t step = 0;
  int sig = 0;
};

std::optional<TestFault> test_fault() {
  const char* v = std::getenv("BATCHCHECK_TEST_FAULT");
  if (!v) return std::nullopt;
  std::string s(v);
  TestFault f;
  auto colon = s.find(':');
  if (colon == std::string::npos) return std::nullopt;
  f.where = s.substr(0, colon);
  std::string rest = s.substr(colon + 1);
  if (f.where == "log" || f.where == "maps" || f.where == "cuda-assert") return f;
  if (f.where == "step" || f.where == "from") {
    auto c2 = rest.find(':');
    if (c2 == std::string::npos) return std::nullopt;
    f.step = std::stoull(rest.substr(0, c2));
    rest = rest.substr(c2 + 1);
  }
  static const std::pair<const char*, int> names[] = {{"SEGV", SIGSEGV}, {"ABRT", SIGABRT}, {"KILL", SIGKILL}, {"BUS", SIGBUS}, {"FPE", SIGFPE}};
  for (const auto& [name, sig] : names) {
    if (rest == name) f.sig = sig;
  }
  if (f.sig == 0) return std::nullopt;
  return f;
}

// The CUDA libraries of LibTorch this process has mapped, by file name ("none").
std::string mapped_cuda_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> seen;
  for (std::string line; std::getline(maps, line);) {
    const std::string name = line.substr(line.rfind('/') == std::string::npos ? line.size() : line.rfind('/') + 1);
    if (name.rfind("libtorch_cuda", 0) != 0 && name.rfind("libcudnn", 0) != 0 && name.rfind("libc10_cuda", 0) != 0) continue;
    if (std::find(seen.begin(), seen.end(), name) == seen.end()) seen.push_back(name);
  }
  std::string out;
  for (const auto& n : seen) out += (out.empty() ? "" : " ") + n;
  return out.empty() ? "none" : out;
}

[[noreturn]] void die_of(int sig) {
  std::signal(sig, SIG_DFL);
  ::raise(sig);
  std::_Exit(128 + sig);
}

class FaultSink : public ScanSink {
 public:
  FaultSink(ScanSink& inner, const std::optional<TestFault>& fault) : inner_(inner), fault_(fault) {}
  void start(const ScanStart& s) override { inner_.start(s); }
  void begin(const StepInfo& s, const std::vector<int64_t>& indices) override {
    inner_.begin(s, indices);
    if (fault_ && ((fault_->where == "step" && fault_->step == s.step) || (fault_->where == "from" && s.step >= fault_->step))) {
      die_of(fault_->sig);
    }
  }
  void record(RecordEvent&& r) override { inner_.record(std::move(r)); }
  void end(const StepEnd& e) override { inner_.end(e); }
  void localizing(const StepInfo& s) override {
    inner_.localizing(s);
    if (fault_ && fault_->where == "localize") die_of(fault_->sig);
  }
  void cause(CauseEvent&& c) override { inner_.cause(std::move(c)); }
  void split(uint64_t jobs, uint64_t from) override { inner_.split(jobs, from); }
  void finish(const ScanEnd& e) override { inner_.finish(e); }

 private:
  ScanSink& inner_;
  const std::optional<TestFault>& fault_;
};

}  // namespace

void engine_child(const std::string& request, int event_fd, std::ostream& err) {
  tune_allocator_for_batches();
  // LibTorch reads TORCH_CPP_LOG_LEVEL (which the supervisor sets) only here, for glog and
  // c10's own logger alike; Python's torch calls it at import, LibTorch never does.
  c10::initLogging();
  const EngineRequest req = decode_request(request);
  const ScanCommand& cmd = req.command;
  log_to_parent(cmd.log_level);  // the supervisor relays it (core/base/log.h)
  JournalWriter journal(event_fd);
  std::string loading;  // the file being loaded, for an allocation that fails there
  try {
    Config cfg = prepare_scan_config(cmd);
    BackendOptions bo = backend_options(cmd, cfg);
    bo.load_cuda_late = false;
    const std::optional<TestFault> fault = test_fault();
    bo.simulate_device_asserts = fault && fault->where == "cuda-assert";
    if (fault && fault->where == "maps") err << "batchcheck test: mapped before the model: " << mapped_cuda_libraries() << std::endl;
    bo.loading = [&journal, &fault, &loading](const std::string& file) {
      loading = file;
      journal.loading(file);
      if (fault && fault->where == "load") die_of(fault->sig);
      if (fault && fault->where == "log") {
        LOG(WARNING) << "batchcheck test: a LibTorch warning";
        LOG(ERROR) << "batchcheck test: a LibTorch error";
      }
    };
    auto backend = make_torch_backend(cfg, bo);
    const ScanSettings settings = engine_settings(cmd);
    SignalScope signals(cmd.handle_signals, is_job(cmd));
    loading.clear();  // loaded: an allocation that fails from here is the scan's, not a file's
    FaultSink sink(journal, fault);
    replay(cfg, settings, *backend, sampler_order, sink, req.resume);
  } catch (const InputError& e) {
    journal.error("input", e.file(), e.where(), e.detail());
  } catch (const std::exception& e) {
    // Out of memory outside a batch (loading the model or the data under a tight ulimit, a
    // container's limit): the machine's limit, an input error naming the file, not a bug.
    // A batch's own allocation failure is a batch-out-of-memory finding (forward_stage).
    const std::string what = parse_error_text(e.what()).message;
    if (!is_out_of_memory(e)) throw;
    const std::optional<uint64_t> bytes = allocation_bytes(what);
    journal.error("input", loading, "",
                  "out of memory" + (bytes ? " (an allocation of " + std::to_string(*bytes) + " bytes failed)" : std::string()) +
                      (loading.empty() ? " during the scan" : " while loading it") +
                      ": give the scan more memory (ulimit -v, the container's limit) or use a smaller batch size");
  }
}

}  // namespace batchcheck
