#pragma once
// The supervised scan: the torch-free batchcheck process runs the replay in an engine child
// process and builds the report from the child's journal (core/journal/journal.h). A child that
// dies (a signal, an abort, the OOM killer) or overruns --batch-timeout becomes one line
// while loading, or a finding at its batch after which a fresh child goes on; SIGINT and
// SIGTERM are the parent's, so they work while the child is stuck.
#include <ostream>
#include <string>
#include <vector>

#include "core/command/scan_setup.h"

namespace batchcheck {

struct SupervisorOptions {
  std::string engine;             // the engine child's executable
  std::vector<std::string> args;  // and its arguments (it reads the request on fd 3, writes the journal on fd 4)
  std::string module;             // the engine library the child loads (libbatchcheck_scan.so), if known
  std::vector<std::string> env;   // NAME=value set in the child's environment (cuda_preload.h)
  double grace_seconds = 1.0;     // after SIGINT/SIGTERM, how long the child may take to end its batch
  unsigned max_consecutive_failures = 3;  // crashed or timed-out batches in a row before the scan stops
};

// The automatic --batch-timeout: at least kTimeoutFloor seconds, else 10x the longest
// wait for the child so far.
constexpr double kTimeoutFloorSeconds = 300;
constexpr double kTimeoutFactor = 10;

// Throws InputError for unusable input (exit 2); delivers the report in every other case.
ScanOutcome supervise_scan(const ScanCommand& cmd, std::ostream& out, std::ostream& err, const SupervisorOptions& opt);

// "SIGSEGV (segmentation fault)"
std::string describe_signal(int sig);

}  // namespace batchcheck
