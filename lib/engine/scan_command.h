#pragma once
// `batchcheck scan` as a library call: config, overrides, backend, scan, report file.
// The CLI maps the outcome to an exit code; tests call this directly.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "core/config.h"
#include "core/report.h"

namespace batchcheck {

struct ScanCommand {
  std::string config_path;
  std::optional<std::string> output_path;  // "-" or unset: stdout
  FailOn fail_on = FailOn::Error;
  std::optional<std::string> device;
  std::optional<Mode> mode;
  bool edges = false;
  bool no_backward = false;  // --no-backward
  std::optional<uint64_t> max_batches;
  std::optional<uint64_t> rank;
  std::optional<uint64_t> threads;
  int verbosity = 0;  // -1 quiet, 0 normal, 1 verbose
  bool progress = false;
  bool handle_signals = true;  // SIGINT/SIGTERM stop after the current batch
};

struct ScanOutcome {
  bool failed = false;    // the verdict
  bool complete = true;   // false if interrupted
  int signal = 0;         // the signal that interrupted the scan, if any
};

// Throws InputError for unusable input (exit 2); a report is written in every other case.
ScanOutcome scan_command(const ScanCommand& cmd, std::ostream& out, std::ostream& err);

// Writes `text` to `path` atomically: a temporary file beside it, then rename.
void write_file_atomically(const std::string& path, const std::string& text);
// Throws InputError when `output` is the config, the model or a data file of this scan.
void refuse_overwriting_inputs(const std::string& output, const std::string& config_path, const Config& cfg);
// Throws InputError unless a report can be written at `path`.
void check_writable(const std::string& path);

}  // namespace batchcheck
