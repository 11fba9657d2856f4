#pragma once
// Which LibTorch libraries an engine child is started with. The engine links libtorch_cpu
// only (a CPU scan maps no CUDA library); a CUDA scan must have libtorch_cuda, and cuDNN with
// it, loaded when the process starts, as `import torch` has them: loaded late (a dlopen once
// libtorch_cpu runs), cuDNN's first call jumps through a null pointer (seen on an H200 with
// torch 2.11). The parent finds the library where the engine's own LibTorch lives, by the
// loader's rules, and starts the child with it in LD_PRELOAD. Torch-free.
#include <optional>
#include <string>
#include <vector>

namespace batchcheck {

// The folders the dynamic loader searches for a dependency of the ELF object `object`, in its
// order, before its cache and the system's folders: DT_RPATH (only when there is no
// DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH; $ORIGIN expanded. Empty when the file is no ELF
// object this reads (an error is not a reason to fail a scan: the child then loads as before).
std::vector<std::string> loader_search_dirs(const std::string& object, const std::string& ld_library_path);

// Where the loader finds `soname` for `object`: the first of loader_search_dirs holding it, or
// nullopt (then the system's cache decides, and no LibTorch wheel is there).
std::optional<std::string> find_dependency(const std::string& object, const std::string& soname,
                                           const std::string& ld_library_path);

// Whether an NVIDIA GPU can be visible to this process: a device node or the driver's GPU
// list, and CUDA_VISIBLE_DEVICES not empty or "-1". Decides `auto` without loading CUDA.
bool nvidia_gpu_present(const char* cuda_visible_devices);

// What an engine child of a scan on `device` needs in its environment: LD_PRELOAD with
// libtorch_cuda.so beside the libtorch_cpu.so that `module` (the engine) loads, put first
// before the user's own LD_PRELOAD, and BATCHCHECK_ENGINE_PRELOAD naming it (the child takes
// it out of LD_PRELOAD again, so nothing it starts inherits it). Empty for a CPU scan, an
// `auto` scan without a GPU, and a LibTorch without CUDA.
std::vector<std::string> engine_environment(const std::string& device, const std::string& module);

// In the engine child, before the engine loads: LD_PRELOAD put back as the user had it, and
// the library loaded now (RTLD_GLOBAL) where LD_PRELOAD could not name it. "" when it is
// loaded (or none was asked for); else the loader's words.
std::string preload_engine_libraries();

constexpr const char* kEnginePreloadVar = "BATCHCHECK_ENGINE_PRELOAD";

}  // namespace batchcheck
