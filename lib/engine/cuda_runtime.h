#pragma once
// LibTorch's CUDA library in this process, and the scan's device. The build links libtorch_cpu
// only (cmake/TorchCpu.cmake): libtorch_cuda.so is loaded here, or preloaded by the supervisor
// (supervise/cuda_preload.h). Engine-internal.
#include <c10/core/Device.h>

#include <string>

#include "engine/backend_options.h"

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

// "; LibTorch's CUDA library and libtorch.so did not load: ..." when load_cuda_runtime() failed (a library
// built against the whole LibTorch may fail of that), else "".
std::string libtorch_rest_note();

// The scan's device from --device / the config's "device": CUDA's library loaded first when
// asked for (in-process; the engine child has it preloaded). Throws InputError naming where the device
// was asked for when it is not there.
// `note`: why "cuda" is the GPU it is, under a launcher (core/config/device_choice.h).
c10::Device pick_device(const BackendOptions& opt, std::string* note = nullptr);

// Creates the CUDA context of `device` and the cuBLAS and cuDNN handles a model's first matmul
// and convolution would (a fraction of a second each); failures are left to the scan to meet.
void warm_cuda(const c10::Device& device);

}  // namespace batchcheck
