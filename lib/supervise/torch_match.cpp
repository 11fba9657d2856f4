#include "supervise/torch_match.h"

#include <filesystem>
#include <fstream>
#include <regex>

#include "core/base/text.h"
#include "supervise/cuda_preload.h"

namespace batchcheck {

namespace {

namespace fs = std::filesystem;

// "2.15" of "2.15.0+cu132"; "" where it does not start with two numbers.
std::string minor_of(const std::string& v) {
  std::smatch m;
  static const std::regex two(R"(^(\d+)\.(\d+))");
  return std::regex_search(v, m, two) ? m[1].str() + "." + m[2].str() : "";
}

}  // namespace

std::string torch_version_of(const std::string& dir) {
  std::error_code ec;
  // A pip torch: torch/lib/ beside torch/version.py ("__version__ = '2.15.0+cu132'").
  std::ifstream py(fs::path(dir).parent_path() / "version.py");
  static const std::regex line(R"(^__version__\s*=\s*['"]([0-9][^'"]{0,63})['"])");
  for (std::string l; py && std::getline(py, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line)) return m[1].str();
  }
  // A distribution's: the library's real name carries it (libtorch_cpu.so.1.13).
  const fs::path real = fs::canonical(fs::path(dir) / "libtorch_cpu.so", ec);
  if (ec) return "";
  const std::string name = real.filename().string();
  static const std::regex soname(R"(^libtorch_cpu\.so\.(\d+\.\d+(\.\d+)?)$)");
  std::smatch m;
  return std::regex_match(name, m, soname) ? m[1].str() : "";
}

std::optional<FoundTorch> find_engine_torch(const std::string& module, const std::string& ld_library_path,
                                            const std::vector<std::string>& system_dirs) {
  std::optional<std::string> dir = find_dependency(module, "libtorch_cpu.so", ld_library_path);
  if (!dir) {
    for (const std::string& d : system_dirs) {
      std::error_code ec;
      if (fs::exists(fs::path(d) / "libtorch_cpu.so", ec)) {
        dir = d;
        break;
      }
    }
  }
  if (!dir) return std::nullopt;
  return FoundTorch{*dir, torch_version_of(*dir)};
}

std::string torch_mismatch(const std::optional<FoundTorch>& found, const std::string& built) {
  const std::string want = minor_of(built);
  const std::string fix = "pip install torch==" + (want.empty() ? built : want) +
                          ".*, or the batchcheck built for your torch: pip install --no-binary batchcheck batchcheck "
                          "(builds it against your torch; needs a C++ compiler)";
  if (!found) {
    return "the scan engine needs LibTorch (libtorch_cpu.so of torch " + (want.empty() ? built : want) +
           "), and none is found where it looks (beside the batchcheck package, LD_LIBRARY_PATH, the system's "
           "folders): " + fix;
  }
  const std::string have = minor_of(found->version);
  if (want.empty() || have.empty() || want == have) return "";
  return "this batchcheck was built for torch " + want + " and finds torch " + single_line(found->version) + " in " +
         single_line(found->dir) + ": " + fix;
}

}  // namespace batchcheck
