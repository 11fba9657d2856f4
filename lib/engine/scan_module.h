#pragma once
// The ABI between libbatchcheck_scan.so and what loads it: the batchcheck binary's engine child
// (app/scan_supervised.cpp) and the in-process module (app/scan_inprocess.cpp).
#include <string>

#include "engine/scan_command.h"

namespace batchcheck {

struct ScanModuleResult {
  ScanOutcome outcome;
  std::string file, where, what;  // the InputError, or the internal error's message
};

constexpr int kScanModuleOk = 0;
constexpr int kScanModuleInputError = 2;
constexpr int kScanModuleInternalError = 3;
constexpr const char* kScanModuleSymbol = "batchcheck_scan_v1";
using ScanModuleFn = int (*)(const ScanCommand*, std::ostream*, std::ostream*, ScanModuleResult*);
// The supervisor's engine child: the request, the journal's file descriptor.
constexpr const char* kEngineChildSymbol = "batchcheck_engine_child_v1";
using EngineChildFn = int (*)(const std::string*, int, std::ostream*, ScanModuleResult*);

}  // namespace batchcheck
