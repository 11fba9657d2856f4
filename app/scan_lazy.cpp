#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "core/errors.h"
#include "engine/scan_module.h"
#include "scan_entry.h"

namespace batchcheck {

namespace {
// libbatchcheck_scan.so lives next to the executable.
std::string module_path() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::filesystem::path dir = n > 0 ? std::filesystem::path(std::string(buf, static_cast<std::size_t>(n))).parent_path()
                                    : std::filesystem::path(".");
  return (dir / "libbatchcheck_scan.so").string();
}
}  // namespace

ScanOutcome run_scan_entry(const ScanCommand& cmd, std::ostream& out, std::ostream& err) {
  const std::string path = module_path();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("cannot load the scan engine: ") + ::dlerror());
  auto fn = reinterpret_cast<ScanModuleFn>(::dlsym(handle, kScanModuleSymbol));
  if (!fn) throw std::runtime_error(path + " has no " + kScanModuleSymbol);
  ScanModuleResult result;
  int code = fn(&cmd, &out, &err, &result);
  // The module stays loaded: LibTorch does not support being unloaded.
  if (code == kScanModuleInputError) throw InputError(result.file, result.where, result.what);
  if (code != kScanModuleOk) throw std::runtime_error(result.what);
  return result.outcome;
}

}  // namespace batchcheck
