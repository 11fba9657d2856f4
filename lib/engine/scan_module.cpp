// The entry points of libbatchcheck_scan.so: the supervisor's engine child, and the in-process
// scan of libbatchcheck_inprocess.so (app/scan_inprocess.cpp).
// Nothing is thrown across the module boundary: errors come back as plain data.
#include <exception>
#include <ostream>
#include <string>

#include "core/base/errors.h"
#include "core/base/log.h"
#include "core/findings/error_text.h"
#include "engine/scan_command.h"
#include "engine/scan_module.h"

extern "C" __attribute__((visibility("default"))) int batchcheck_scan_v1(const batchcheck::ScanCommand* cmd,
                                                                          std::ostream* out, std::ostream* err,
                                                                          batchcheck::ScanModuleResult* result) {
  // This module's diagnostics (its own copy of core's log) go where the caller's do.
  batchcheck::LogScope log_scope(*err);
  batchcheck::set_log_level(cmd->log_level);
  try {
    result->outcome = batchcheck::scan_command(*cmd, *out, *err);
    return batchcheck::kScanModuleOk;
  } catch (const batchcheck::InputError& e) {
    result->file = e.file();
    result->where = e.where();
    result->what = e.detail();
    return batchcheck::kScanModuleInputError;
  } catch (const std::exception& e) {
    // LibTorch's errors carry a C++ backtrace: the user sees the message only.
    result->what = batchcheck::parse_error_text(e.what()).message;
    return batchcheck::kScanModuleInternalError;
  }
}

extern "C" __attribute__((visibility("default"))) int batchcheck_engine_child_v1(const std::string* request, int event_fd,
                                                                                 std::ostream* err,
                                                                                 batchcheck::ScanModuleResult* result) {
  try {
    batchcheck::engine_child(*request, event_fd, *err);
    return batchcheck::kScanModuleOk;
  } catch (const std::exception& e) {
    result->what = batchcheck::parse_error_text(e.what()).message;
    return batchcheck::kScanModuleInternalError;
  }
}
