#pragma once
// What `batchcheck scan` was asked to do, as data: the command line's settings, the report's
// views. The supervisor sends it to the engine child (core/journal/journal.h), the command layer
// delivers by it (core/command/scan_setup.h).
#include <cstdint>
#include <optional>
#include <string>

#include "core/base/log.h"
#include "core/config/config.h"
#include "core/report/report.h"
#include "core/scan/scan.h"

namespace batchcheck {

// The report's views besides the JSON (core/views/views.h), written after it.
struct ViewTargets {
  std::optional<std::string> junit, markdown, html;  // --junit, --markdown, --html FILE: written atomically
  bool github = false;                          // --github, or GITHUB_ACTIONS=true: workflow commands on stderr
  std::optional<std::string> github_summary;    // $GITHUB_STEP_SUMMARY with github: the markdown appended
  bool any_file() const { return junit || markdown || html; }
};

struct ScanCommand {
  std::string config_path;
  ViewTargets views;
  std::optional<std::string> output_path;  // "-" or unset: stdout
  FailOn fail_on = FailOn::Error;
  std::optional<std::string> device;
  std::optional<Mode> mode;
  std::optional<Precision> precision;   // --precision
  std::optional<double> half_headroom;  // --half-headroom
  bool edges = false;
  bool fail_fast = false;    // --fail-fast: likeliest failures first, stop at the first error
  bool no_backward = false;  // --no-backward
  std::optional<uint64_t> max_batches;
  std::optional<uint64_t> rank;
  std::optional<uint64_t> threads;
  // --batch-timeout: seconds one step may take; 0 = no limit; unset = automatic.
  std::optional<double> batch_timeout;
  bool quiet = false;  // -q: no summary, no progress line
  LogLevel log_level = LogLevel::info;     // --log-level (-v: debug); the engine child sends what passes it
  std::optional<std::string> log_file;     // --log-file: the diagnostics as JSON lines
  bool progress = false;
  bool handle_signals = true;  // SIGINT/SIGTERM stop after the current batch
  // The engine runs inside the caller's process (batchcheck.scan()'s in-process engine,
  // app/scan_inprocess.cpp), beside the user's own PyTorch: what is the process's, not the
  // scan's, is left as it is (signal handlers, malloc's tuning, LibTorch's threads and print hook).
  bool shared_process = false;
  std::optional<Shard> shard;  // --shard, resolved (from the launcher's environment)
  // --jobs: engine processes on this machine; unset = auto (one, split when measured to pay).
  std::optional<uint64_t> jobs;
};

struct ScanOutcome {
  bool failed = false;    // the verdict
  bool complete = true;   // false if interrupted
  int signal = 0;         // the signal that interrupted the scan, if any
  bool report_written = true;  // false: interrupted before there was anything to report
};

}  // namespace batchcheck
