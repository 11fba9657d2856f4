#include "engine/cuda_runtime.h"
// One translation unit for both headers: LibTorch's are costly to compile.
#include "engine/device.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <filesystem>
#include <typeinfo>

#include "core/base/errors.h"
#include "core/base/text.h"
#include "core/config/device_choice.h"

namespace batchcheck {

namespace {

// A library of this LibTorch, beside the libtorch_cpu.so this process runs ("" when that is unknown).
std::string libtorch_library(const char* name) {
  Dl_info cpu{};
  if (!::dladdr(reinterpret_cast<void*>(&at::globalContext), &cpu) || !cpu.dli_fname) return "";
  return (std::filesystem::path(cpu.dli_fname).parent_path() / name).string();
}

}  // namespace

std::string libtorch_cuda_path() { return libtorch_library("libtorch_cuda.so"); }

bool cuda_runtime_loaded() {
  const std::string path = libtorch_cuda_path();
  void* h = path.empty() ? nullptr : ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h) ::dlclose(h);
  return h != nullptr;
}

std::string load_cuda_runtime() {
  static const std::string failure = []() -> std::string {
    const std::string path = libtorch_cuda_path();
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(path, ec)) return "";  // no CUDA in this LibTorch
    // Global: its kernels and CUDA hooks register with libtorch_cpu, and its symbols serve
    // the libraries loaded after it. Then libtorch.so, which needs it: a library built against
    // the whole LibTorch (an operator library, a .pt2 package) names libtorch.so, which would
    // otherwise be looked for on the system's path (and another LibTorch found there). Each
    // one only where it is not loaded yet: the engine child has libtorch_cuda from its start.
    const bool had_cuda = cuda_runtime_loaded();
    for (const char* name : {"libtorch_cuda.so", "libtorch.so"}) {
      const std::string lib = libtorch_library(name);
      if (void* h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
        ::dlclose(h);
        continue;
      }
      if (std::filesystem::exists(lib, ec) && !::dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
        const char* why = ::dlerror();
        return why ? why : lib + ": cannot load";
      }
    }
    if (had_cuda) return "";
    const auto add = c10::Dispatcher::singleton().findSchema({"aten::add", "Tensor"});
    if (!add || !add->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) return path + " loaded, but registered no CUDA kernels";
    const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
    if (typeid(hooks) == typeid(at::CUDAHooksInterface)) {
      return "LibTorch had settled its CUDA hooks before " + path + " was loaded";
    }
    return "";
  }();
  return failure;
}

bool libtorch_has_cuda() {
  const std::string path = libtorch_cuda_path();
  std::error_code ec;
  return !path.empty() && std::filesystem::exists(path, ec);
}

std::string libtorch_rest_note() {
  const std::string failure = load_cuda_runtime();
  if (failure.empty()) return "";
  // The load can fail after both libraries loaded (the CUDA checks): libtorch.so is then
  // there, and not what the error is about.
  const std::string rest = libtorch_library("libtorch.so");
  if (void* h = rest.empty() ? nullptr : ::dlopen(rest.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    ::dlclose(h);
    return "";
  }
  return "; LibTorch's CUDA library and libtorch.so did not load: " + single_line(failure);
}

c10::Device pick_device(const BackendOptions& opt, std::string* note) {
  std::string d = opt.device;
  const bool wants_cuda = d == "auto" || d.rfind("cuda", 0) == 0;
  std::string cuda_failure;
  if (wants_cuda && !opt.load_cuda_late && !cuda_runtime_loaded()) {
    // The engine child's parent preloads CUDA's library wherever it can be used: without
    // it, "auto" is the CPU, and "cuda" says why there is none.
    if (d == "auto") return c10::Device(c10::kCPU);
    if (libtorch_has_cuda()) cuda_failure = libtorch_cuda_path() + " was not loaded when the scan engine started";
  } else if (wants_cuda) {
    cuda_failure = load_cuda_runtime();
  }
  // No CUDA_LAUNCH_BLOCKING: it serializes every kernel launch (a scan cost 2-4 training epochs
  // on an H200), while the synchronize after each forward, loss and backward (`sync`) pins an
  // error to its batch and stage as well; a batch that asserts runs again on the CPU.
  if (d == "auto") d = torch::cuda::is_available() ? "cuda" : "cpu";
  if (d.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available()) {
      if (!cuda_failure.empty()) {
        throw InputError(opt.device_file, opt.device_where, "\"" + opt.device + "\" requested, but LibTorch's CUDA library does not load (" +
                                                                  single_line(cuda_failure) + "); use --device cpu");
      }
      throw InputError(opt.device_file, opt.device_where,
                       "\"" + opt.device + "\" requested, but CUDA is not available (" +
                           (libtorch_has_cuda() ? "no GPU is visible to this LibTorch" : "this LibTorch has no CUDA support") +
                           "); use --device cpu");
    }
    const DeviceChoice choice = choose_cuda_device(d, launcher_local_rank([](const char* n) { return std::getenv(n); }),
                                                   static_cast<uint64_t>(torch::cuda::device_count()));
    if (note) *note = choice.note;
    d = choice.device;
    c10::Device dev(d);
    if (dev.has_index() && dev.index() >= static_cast<int>(torch::cuda::device_count())) {
      throw InputError(opt.device_file, opt.device_where, "\"" + d + "\" does not exist: " + std::to_string(torch::cuda::device_count()) + " CUDA device(s) visible");
    }
    return dev.has_index() ? dev : c10::Device(c10::kCUDA, 0);
  }
  return c10::Device(c10::kCPU);
}

void warm_cuda(const c10::Device& device) {
  try {
    at::NoGradGuard no_grad;
    const auto opts = at::TensorOptions().device(device).dtype(at::kFloat);
    at::Tensor x = at::ones({1, 1, 4, 4}, opts);
    at::Tensor y = at::conv2d(x, at::ones({1, 1, 3, 3}, opts)).reshape({1, 4}).mm(at::ones({4, 1}, opts));
    torch::cuda::synchronize(device.index());
  } catch (const std::exception&) {
  }
}

bool cuda_device_visible() { return load_cuda_runtime().empty() && torch::cuda::is_available(); }

}  // namespace batchcheck
