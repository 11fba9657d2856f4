#pragma once
// How the CLI reaches the scan engine. Two implementations, chosen at link time:
// scan_direct.cpp calls it in-process (tests), scan_lazy.cpp loads
// libbatchcheck_scan.so on first use (the batchcheck binary), so that commands
// other than scan never load LibTorch.
#include <ostream>

#include "engine/scan_command.h"

namespace batchcheck {
ScanOutcome run_scan_entry(const ScanCommand& cmd, std::ostream& out, std::ostream& err);
}  // namespace batchcheck
