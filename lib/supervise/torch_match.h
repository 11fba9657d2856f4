#pragma once
// Whether the LibTorch the engine would load is the one it was built for, told before it loads
// (a wheel is built for one torch minor version: another one's libtorch_cpu.so fails in the
// dynamic linker, or worse, later). Torch-free.
#include <optional>
#include <string>
#include <vector>

namespace batchcheck {

struct FoundTorch {
  std::string dir;      // the folder of the libtorch_cpu.so the engine would load
  std::string version;  // "2.14.1" ("" where it cannot be told)
};

// The LibTorch `module` (the engine) would load: by the loader's rules (cuda_preload.h), then
// the system's folders. nullopt where none is found.
std::optional<FoundTorch> find_engine_torch(const std::string& module, const std::string& ld_library_path,
                                            const std::vector<std::string>& system_dirs);

// The version of the torch whose lib/ folder is `dir`: its torch/version.py (a pip torch), else
// the library's own name (libtorch_cpu.so.1.13, Debian's); "" where neither says.
std::string torch_version_of(const std::string& dir);

// "" where `found` serves an engine built against LibTorch `built` (the same major.minor, or
// either unknown); else the one line that says so and what to do. `found` nullopt: none found.
std::string torch_mismatch(const std::optional<FoundTorch>& found, const std::string& built);

}  // namespace batchcheck
