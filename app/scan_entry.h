#pragma once
// How the CLI reaches the scan engine. Two implementations, chosen at link time:
// scan_direct.cpp calls it in-process (tests), scan_supervised.cpp runs it in a supervised
// engine child that loads libbatchcheck_scan.so (the batchcheck binary), so that commands
// other than scan never load LibTorch and a crash inside LibTorch never kills the gate.
#include <ostream>

#include "engine/scan_command.h"

namespace batchcheck {
ScanOutcome run_scan_entry(const ScanCommand& cmd, std::ostream& out, std::ostream& err);

// The engine child: `batchcheck __engine-child`, started by the supervisor only.
constexpr const char* kEngineChildArg = "__engine-child";
int run_engine_child();
}  // namespace batchcheck
