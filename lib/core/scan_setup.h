#pragma once
// `batchcheck scan` around the replay, torch-free: the command's settings, the config with
// the command line's overrides, where the report may go, and delivering it. Shared by the
// supervisor (the batchcheck process) and the in-process scan (tests).
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/report.h"
#include "core/scan.h"

namespace batchcheck {

// The report's views besides the JSON (core/views.h), written after it.
struct ViewTargets {
  std::optional<std::string> junit, markdown, html;  // --junit, --markdown, --html FILE: written atomically
  bool github = false;                          // --github, or GITHUB_ACTIONS=true: workflow commands on stderr
  std::optional<std::string> github_summary;    // $GITHUB_STEP_SUMMARY with github: the markdown appended
};

// What one run reads and writes, for the guard below: an input by its path and what it is ("the
// config", "part 2"); an output by its path and the flag that named it ("-o", "--html").
struct RunFile {
  std::string path, what;
};

struct ScanCommand {
  std::string config_path;
  ViewTargets views;
  std::optional<std::string> output_path;  // "-" or unset: stdout
  FailOn fail_on = FailOn::Error;
  std::optional<std::string> device;
  std::optional<Mode> mode;
  bool edges = false;
  bool fail_fast = false;    // --fail-fast: likeliest failures first, stop at the first error
  bool no_backward = false;  // --no-backward
  std::optional<uint64_t> max_batches;
  std::optional<uint64_t> rank;
  std::optional<uint64_t> threads;
  // --batch-timeout: seconds one step may take; 0 = no limit; unset = automatic.
  std::optional<double> batch_timeout;
  int verbosity = 0;  // -1 quiet, 0 normal, 1 verbose
  bool progress = false;
  bool handle_signals = true;  // SIGINT/SIGTERM stop after the current batch
  std::optional<Shard> shard;  // --shard, resolved (from the launcher's environment)
  // --jobs: engine processes on this machine; unset = auto (one, split when measured to pay).
  std::optional<uint64_t> jobs;
};

struct ScanOutcome {
  bool failed = false;    // the verdict
  bool complete = true;   // false if interrupted
  int signal = 0;         // the signal that interrupted the scan, if any
};

// The config with the command line's overrides; refuses a report path that is an input or
// cannot be written, before any work. Throws InputError.
Config prepare_scan_config(const ScanCommand& cmd);
ScanSettings scan_settings(const ScanCommand& cmd);

// Writes the report (stdout or -o, atomically) and the summary. Throws InputError when the
// report cannot be delivered: a gate whose report was lost must not pass.
void deliver_report(const ScanCommand& cmd, const ScanResult& result, std::ostream& out, std::ostream& err);

// Writes the views of `report` that `v` asks for. Throws InputError for a file it cannot write.
void deliver_views(const ViewTargets& v, const nlohmann::ordered_json& report, std::ostream& err);
// Throws InputError unless every view file can be written (before any work).
void check_view_targets(const ViewTargets& v);
// The view files and the step summary of `v` (outputs, for refuse_clobbering).
std::vector<RunFile> view_outputs(const ViewTargets& v);

// Writes `text` to `path` atomically: a temporary file beside it, then rename.
void write_file_atomically(const std::string& path, const std::string& text);
// Every file a scan of `cfg` reads: the config, the model, its operator libraries, each data
// file, the recorded order. An image folder's members are guarded by its root (below).
std::vector<RunFile> scan_inputs(const std::string& config_path, const Config& cfg);
// The files `cmd` writes: -o (a shard's part path), --junit, --markdown, --html and the
// GitHub step summary.
std::vector<RunFile> scan_outputs(const ScanCommand& cmd);
// Throws InputError(output, flag, ...) when an output is an input of the run or another output
// of it, directly or through a symlink or a hard link (the same file), or lies inside
// `image_root` (the dataset's folder) or is a hard link to one of its files.
void refuse_clobbering(const std::vector<RunFile>& outputs, const std::vector<RunFile>& inputs,
                       const std::string& image_root = "");
// Throws InputError unless a report can be written at `path`.
void check_writable(const std::string& path);

}  // namespace batchcheck
