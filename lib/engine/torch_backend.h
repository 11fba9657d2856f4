#pragma once
// The LibTorch Backend: TorchScript model, npy/pt data, forward, value checks, loss.
// No torch types in this header: callers stay cheap to compile.
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
};

// Whether this LibTorch has CUDA and sees a GPU (the CUDA tests skip without one).
bool cuda_device_visible();

// Loads the model and opens the data. Throws InputError for unusable files.
std::unique_ptr<Backend> make_torch_backend(const Config& cfg, const BackendOptions& options);

}  // namespace batchcheck
