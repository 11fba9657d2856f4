#pragma once
// The one place where the LibTorch versions batchcheck builds against differ in API.
// Everything else in lib/engine/ is written once.
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/version.h>  // torch/csrc/api/include: TORCH_VERSION_MAJOR

#include <string>

namespace batchcheck::compat {

// c10's warning hook: process(location, msg, verbatim) up to 1.13, process(Warning) after.
class WarningSink : public c10::WarningHandler {
 public:
  virtual void on_warning(const std::string& message) = 0;
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override { on_warning(warning.msg()); }
#else
  void process(const c10::SourceLocation& /*where*/, const std::string& msg, const bool /*verbatim*/) override {
    on_warning(msg);
  }
#endif
};

// Installing the hook: c10::Warning::set_warning_handler in 1.13, c10::WarningUtils:: in 2.x.
inline void set_warning_handler(c10::WarningHandler* handler) {
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::set_warning_handler(handler);
#else
  c10::Warning::set_warning_handler(handler);
#endif
}

// torch.autocast's thread-local state, one device type at a time: per device type from 2.3
// on (set_autocast_enabled(device, ...)), separate CPU and GPU functions up to then.
inline bool autocast_enabled(c10::DeviceType device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}
inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}
inline void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

// Whether this LibTorch's autocast runs `dtype` on `device`: CPU autocast took float16 in 2.1
// (bfloat16 only before).
inline bool autocast_supports(c10::DeviceType device, c10::ScalarType dtype) {
  if (device != c10::DeviceType::CPU || dtype != c10::ScalarType::Half) return true;
  return TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1);
}

// `with torch.autocast(device, dtype)`: entered, then left as Python leaves it (the cast
// weights' cache cleared when the outermost one exits). Disabled, it leaves autocast as is.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype, bool enabled = true)
      : device_(device), active_(enabled), was_(autocast_enabled(device)), was_dtype_(autocast_dtype(device)) {
    if (!active_) return;
    set_autocast(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast(device_, was_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool active_, was_;
  c10::ScalarType was_dtype_;
};

// Autocast off on the CPU and CUDA while it lives: TorchScript specializes a graph on the
// autocast state it is first run or inlined under (its Autocast pass bakes the casts in), so
// the instrumented copies are made with it off; the float32 run of a batch runs under it.
class NoAutocast {
 public:
  NoAutocast()
      : cpu_(autocast_enabled(c10::DeviceType::CPU)), cuda_(autocast_enabled(c10::DeviceType::CUDA)),
        cpu_dtype_(autocast_dtype(c10::DeviceType::CPU)), cuda_dtype_(autocast_dtype(c10::DeviceType::CUDA)) {
    set_autocast(c10::DeviceType::CPU, false, cpu_dtype_);
    set_autocast(c10::DeviceType::CUDA, false, cuda_dtype_);
  }
  ~NoAutocast() {
    set_autocast(c10::DeviceType::CPU, cpu_, cpu_dtype_);
    set_autocast(c10::DeviceType::CUDA, cuda_, cuda_dtype_);
  }
  NoAutocast(const NoAutocast&) = delete;
  NoAutocast& operator=(const NoAutocast&) = delete;

 private:
  bool cpu_, cuda_;
  c10::ScalarType cpu_dtype_, cuda_dtype_;
};

// Deterministic algorithms with empty tensors filled (NaN, or an integer's largest value), as
// torch.use_deterministic_algorithms(True) sets them: from 2.1 on; false where the build has no
// such fill (1.13 leaves empty tensors as the memory was).
inline bool set_fill_uninitialized_memory(bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
  at::globalContext().setDeterministicFillUninitializedMemory(on);
  return true;
#else
  (void)on;
  return false;
#endif
}

}  // namespace batchcheck::compat

// AOTInductor packages (.pt2) load through torch::inductor::AOTIModelPackageLoader, which
// LibTorch ships from 2.6 on; older builds refuse .pt2 models with a clear message.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define BATCHCHECK_HAS_AOTI 1
#else
#define BATCHCHECK_HAS_AOTI 0
#endif
