// The batchcheck binary's scan: the supervisor (torch-free) runs the replay in an engine
// child, which is this same executable started with kEngineChildArg; the child loads
// libbatchcheck_scan.so (beside the executable), so that commands other than scan, and the
// supervising parent, never load LibTorch.
#include <dlfcn.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <vector>
#include <string>
#include <new>
#include <exception>

#include "core/base/errors.h"
#include "core/base/info.h"
#include "core/base/log.h"
#include "core/journal/journal.h"
#include "engine/scan_module.h"
#include "scan_entry.h"
#include "supervise/cuda_preload.h"
#include "supervise/torch_match.h"
#include "supervise/supervisor.h"

namespace batchcheck {

namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// libbatchcheck_scan.so lives next to the executable.
std::string module_path() {
  std::filesystem::path exe(self_exe());
  std::filesystem::path dir = exe.empty() ? std::filesystem::path(".") : exe.parent_path();
  return (dir / "libbatchcheck_scan.so").string();
}

}  // namespace

ScanOutcome run_scan_entry(const ScanCommand& cmd, std::ostream& out, std::ostream& err) {
  SupervisorOptions opt;
  opt.engine = self_exe();
  if (opt.engine.empty()) throw std::runtime_error("cannot find the batchcheck executable (/proc/self/exe)");
  opt.args = {kEngineChildArg};
  opt.module = module_path();
  // The LibTorch the engine would load is the one it was built for, or one line says so before
  // it loads (another torch's libraries fail in the dynamic linker, or worse, later).
  std::error_code ec;
  if (std::filesystem::exists(opt.module, ec)) {
    static const std::vector<std::string> kSystemDirs = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                                         "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                                         "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"};
    const char* llp = std::getenv("LD_LIBRARY_PATH");
    const std::string mismatch = torch_mismatch(find_engine_torch(opt.module, llp ? llp : "", kSystemDirs), libtorch_version());
    if (!mismatch.empty()) throw InputError("", "", mismatch);
  }
  // LibTorch's own log lines (glog in Debian's build, with its "Logging before
  // InitGoogleLogging()" banner; c10's in pip's) would break the one-line error contract: off
  // unless -v. The engine child inherits it (c10::initLogging); a user's own setting wins.
  // glog (LibTorch 1.13) takes its level from GLOG_minloglevel when it is loaded.
  if (cmd.log_level != LogLevel::debug) {
    ::setenv("TORCH_CPP_LOG_LEVEL", "FATAL", 0);
    ::setenv("GLOG_minloglevel", "3", 0);
  }
  return supervise_scan(cmd, out, err, opt);
}

int run_engine_child() {
  constexpr int kRequestFd = 3, kJournalFd = 4;
  struct stat st {};
  if (::fstat(kRequestFd, &st) != 0 || !S_ISFIFO(st.st_mode) || ::fstat(kJournalFd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    std::cerr << "batchcheck: error: " << kEngineChildArg << " is internal: batchcheck scan starts it itself\n";
    return 2;
  }
  JournalWriter journal(kJournalFd);
  log_to_parent(LogLevel::info);  // this binary's own lines; the engine sets the run's level
  // LibTorch's CUDA library, where the parent asked for it, before the engine's own LibTorch.
  if (const std::string why = preload_engine_libraries(); !why.empty()) {
    log_warn("LibTorch's CUDA library did not load: " + why);
  }
  // LibTorch first, the request after: a child started ahead of its request (the --jobs
  // default's standby) is ready when the request comes.
  const std::string path = module_path();
  // LibTorch's static initializers run inside dlopen: one that throws (std::bad_alloc under a
  // tight ulimit -v) would end in std::terminate's banner and SIGABRT. Said as the error
  // line instead, so the parent prints one line and exits 2.
  static JournalWriter* loading_journal = nullptr;
  loading_journal = &journal;
  const std::terminate_handler previous = std::set_terminate([] {
    std::string what = "its initialization aborted";
    try {
      if (auto e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      what = "out of memory while it initialized";
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    loading_journal->error("input", "", "", "cannot load the scan engine (LibTorch): " + what +
                                                "; if the address space is limited (ulimit -v), LibTorch needs more");
    ::_exit(0);
  });
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::set_terminate(previous);
  std::string request;
  std::vector<char> buf(1 << 16);  // on the heap: `ulimit -s` may be small
  for (;;) {
    ssize_t n = ::read(kRequestFd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buf.data(), static_cast<std::size_t>(n));
  }
  ::close(kRequestFd);
  if (!handle) {
    // Typically a limited address space (ulimit -v): LibTorch's libraries need several GiB mapped.
    journal.error("input", "", "", std::string("cannot load the scan engine (LibTorch): ") + ::dlerror() +
                                       "; if the address space is limited (ulimit -v), LibTorch needs more");
    ::_exit(0);
  }
  auto fn = reinterpret_cast<EngineChildFn>(::dlsym(handle, kEngineChildSymbol));
  if (!fn) {
    journal.error("internal", "", "", path + " has no " + kEngineChildSymbol);
    ::_exit(0);
  }
  ScanModuleResult result;
  if (fn(&request, kJournalFd, &std::cerr, &result) != kScanModuleOk) journal.error("internal", "", "", result.what);
  std::cerr.flush();
  std::fflush(nullptr);
  // LibTorch's static destructors can hang (CUDA) or crash: nothing is left to do.
  ::_exit(0);
}

}  // namespace batchcheck
