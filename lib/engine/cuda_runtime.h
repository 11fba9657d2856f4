#pragma once
// LibTorch's CUDA library in this process. The build links libtorch_cpu
// only (cmake/TorchCpu.cmake): libtorch_cuda.so is loaded here, or preloaded by the supervisor
// (supervise/cuda_preload.h). Engine-internal, and free of LibTorch types: the end-to-end tests,
// which are not built against LibTorch's headers, include it (the scan's device: engine/device.h).
#include <string>

namespace batchcheck {

// Whether this LibTorch has CUDA and sees a GPU (the CUDA tests skip without one).
bool cuda_device_visible();
// Loads libtorch_cuda.so, and libtorch.so which needs it, from beside libtorch_cpu.so when they
// are not loaded yet (the build links libtorch_cpu only: cmake/TorchCpu.cmake): for a CUDA
// device, and before a library built against the whole LibTorch (model.libraries, a .pt2
// package). Must come before anything asks LibTorch about CUDA, which settles its CUDA hooks
// once. "" when CUDA's library is loaded (its kernels and hooks registered) or this LibTorch has
// none; otherwise why not (the loader's words, or what did not register).
std::string load_cuda_runtime();
// Whether libtorch_cuda.so is in this process.
bool cuda_runtime_loaded();
// Whether this LibTorch has a CUDA library (libtorch_cuda.so beside libtorch_cpu.so).
bool libtorch_has_cuda();
// Where that library is, or would be ("" when this process's libtorch_cpu.so is not known).
std::string libtorch_cuda_path();

// "; LibTorch's CUDA library and libtorch.so did not load: ..." when load_cuda_runtime() failed (a library
// built against the whole LibTorch may fail of that), else "".
std::string libtorch_rest_note();

}  // namespace batchcheck
