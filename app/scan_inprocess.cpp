// libbatchcheck_inprocess.so: the command line inside the caller's process, for batchcheck.scan()
// where the user's step runs in Python (model.format "eager"). The engine then only reads frames
// and checks values, on the LibTorch the user's torch has loaded already: no process to start,
// no second LibTorch to load, no journal to relay (python/batchcheck/_stream.py says when).
// This module is torch-free; it dlopens libbatchcheck_scan.so (beside it) for `scan`.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <filesystem>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "cli.h"
#include "core/base/errors.h"
#include "core/base/info.h"
#include "engine/scan_module.h"
#include "scan_entry.h"

namespace batchcheck {

namespace {

// An ostream onto a file descriptor the caller owns (a pipe it reads).
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  ~FdBuf() override { sync(); }

 protected:
  int_type overflow(int_type c) override {
    if (sync() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override {
    const char* p = pbase();
    while (p < pptr()) {
      const ssize_t n = ::write(fd_, p, static_cast<std::size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the reader is gone: what is left is dropped, never a signal (Python ignores SIGPIPE)
      p += n;
    }
    setp(buf_, buf_ + sizeof buf_);
    return 0;
  }

 private:
  int fd_;
  char buf_[4096];
};

// libbatchcheck_scan.so lives next to this module.
std::string module_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&module_path), &info) == 0 || info.dli_fname == nullptr) return "libbatchcheck_scan.so";
  return (std::filesystem::path(info.dli_fname).parent_path() / "libbatchcheck_scan.so").string();
}

}  // namespace

ScanOutcome run_scan_entry(const ScanCommand& given, std::ostream& out, std::ostream& err) {
  ScanCommand cmd = given;
  cmd.shared_process = true;
  cmd.handle_signals = false;  // Python's own: a Ctrl-C is the user's KeyboardInterrupt
  const std::string path = module_path();
  // The caller checked that its torch is the one this engine was built for; the engine's
  // LibTorch is then the one already loaded, by its soname.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw InputError("", "", std::string("cannot load the scan engine: ") + ::dlerror());
  auto fn = reinterpret_cast<ScanModuleFn>(::dlsym(handle, kScanModuleSymbol));
  if (!fn) throw std::runtime_error(path + " has no " + kScanModuleSymbol);
  ScanModuleResult result;
  const int rc = fn(&cmd, &out, &err, &result);
  if (rc == kScanModuleInputError) throw InputError(result.file, result.where, result.what);
  if (rc != kScanModuleOk) throw std::runtime_error(result.what);
  return result.outcome;
}

}  // namespace batchcheck

// `batchcheck ARGS...` as the binary runs it, its stdout and stderr written to these file
// descriptors; returns its exit code. Nothing is thrown across this boundary.
extern "C" __attribute__((visibility("default"))) int batchcheck_run_v1(int argc, const char* const* argv, int out_fd,
                                                                        int err_fd) {
  batchcheck::FdBuf out_buf(out_fd), err_buf(err_fd);
  std::ostream out(&out_buf), err(&err_buf);
  try {
    std::vector<std::string> args(argv, argv + argc);
    const int rc = batchcheck::run_cli(args, out, err);
    out.flush();
    err.flush();
    return rc;
  } catch (...) {
    err << "batchcheck: internal error: the in-process engine failed (this is a bug in batchcheck; please report it)\n";
    err.flush();
    return 3;
  }
}

// The LibTorch version the engine was built against ("2.15.0"): the caller's torch must be it.
extern "C" __attribute__((visibility("default"))) const char* batchcheck_libtorch_version_v1() {
  static const std::string v = batchcheck::libtorch_version();
  return v.c_str();
}
