#pragma once
// The scan's device: --device / the config's "device" made a c10::Device, and its CUDA context
// warmed. Engine-internal (LibTorch's types); the library loading is engine/cuda_runtime.h.
#include <c10/core/Device.h>

#include <string>

#include "engine/backend_options.h"

namespace batchcheck {

// The scan's device from --device / the config's "device": CUDA's library loaded first when
// asked for (in-process; the engine child has it preloaded). Throws InputError naming where the device
// was asked for when it is not there.
// `note`: why "cuda" is the GPU it is, under a launcher (core/config/device_choice.h).
c10::Device pick_device(const BackendOptions& opt, std::string* note = nullptr);

// Creates the CUDA context of `device` and the cuBLAS and cuDNN handles a model's first matmul
// and convolution would (a fraction of a second each); failures are left to the scan to meet.
void warm_cuda(const c10::Device& device);

}  // namespace batchcheck
