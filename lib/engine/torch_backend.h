#pragma once
// The LibTorch Backend: TorchScript model, npy/pt data, forward, value checks, loss.
// No torch types in this header: callers stay cheap to compile.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/backend.h"
#include "core/config.h"

namespace batchcheck {

struct BackendOptions {
  std::string device = "cpu";  // cpu, cuda, cuda:N, auto
  // Where the device was named, for errors: ("", "--device") or (config file, "device").
  std::string device_file, device_where = "device";
  Mode mode = Mode::Train;
  bool sync = true;
  bool backward = false;  // forward with autograd, then loss.backward() per batch
  std::optional<uint64_t> threads;
  // Called with each input file's name before LibTorch reads it (the supervisor names the
  // file when the reader crashes).
  std::function<void(const std::string& file)> loading;
};

// Whether this LibTorch has CUDA and sees a GPU (the CUDA tests skip without one).
bool cuda_device_visible();
// LibTorch's CUDA library, which the engine loads only for a CUDA device (cmake/TorchCpu.cmake):
// whether it is in this process, and loading it ("" when it loaded and registered its kernels
// and hooks, or this LibTorch has none; else why not).
bool cuda_library_loaded();
std::string load_cuda_library();

// Loads the model and opens the data. Throws InputError for unusable files.
std::unique_ptr<Backend> make_torch_backend(const Config& cfg, const BackendOptions& options);

}  // namespace batchcheck
