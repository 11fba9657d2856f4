#pragma once
// The one place where the LibTorch versions batchcheck builds against differ in API.
// Everything else in lib/engine/ is written once.
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

}  // namespace batchcheck::compat

// AOTInductor packages (.pt2) load through torch::inductor::AOTIModelPackageLoader, which
// LibTorch ships from 2.6 on; older builds refuse .pt2 models with a clear message.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define BATCHCHECK_HAS_AOTI 1
#else
#define BATCHCHECK_HAS_AOTI 0
#endif
