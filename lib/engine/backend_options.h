#pragma once
// How the engine runs a scan: device, mode, threads, the hooks of the supervisor and tests.
// No torch types: included by the torch-free glue (scan_command) and by the engine's base.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/config/config.h"

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
  // Inside the caller's Python process (ScanCommand::shared_process): LibTorch's thread count
  // and print hook are the user's, and stay so.
  bool shared_process = false;
  // Called with each input file's name before LibTorch reads it (the supervisor names the
  // file when the reader crashes).
  std::function<void(const std::string& file)> loading;
};

}  // namespace batchcheck
