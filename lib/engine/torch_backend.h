#pragma once
// The LibTorch Backend: TorchScript model, npy/pt data, forward, value checks, loss.
// No torch types in this header: callers stay cheap to compile.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/config/config.h"
#include "core/pipeline/backend.h"

namespace batchcheck {

struct BackendOptions {
  std::string device = "cpu";  // cpu, cuda, cuda:N, auto
  // Where the device was named, for errors: ("", "--device") or (config file, "device").
  std::string device_file, device_where = "device";
  Mode mode = Mode::Train;
  bool sync = true;
  // Whether a CUDA device may load libtorch_cuda.so now (in-process scans). The supervised
  // engine child may not: its parent started it with the library preloaded where CUDA is
  // wanted (supervise/cuda_preload.h), since cuDNN loaded late crashes at its first call.
  bool load_cuda_late = true;
  // A test hook (BATCHCHECK_TEST_FAULT=cuda-assert:): a forward error that is a kernel's
  // assertion on CUDA raises CUDA's device-side assert instead, and every later forward,
  // loss and backward of this process raises it too, as a dead CUDA context does.
  bool simulate_device_asserts = false;
  bool backward = false;  // forward with autograd, then loss.backward() per batch
  std::optional<uint64_t> threads;
  // Called with each input file's name before LibTorch reads it (the supervisor names the
  // file when the reader crashes).
  std::function<void(const std::string& file)> loading;
};

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

// Loads the model and opens the data. Throws InputError for unusable files.
std::unique_ptr<Backend> make_torch_backend(const Config& cfg, const BackendOptions& options);

}  // namespace batchcheck
