#pragma once
// `batchcheck scan` around the replay, torch-free: the command's settings, the config with
// the command line's overrides, where the report may go, and delivering it. Shared by the
// supervisor (the batchcheck process) and the in-process scan (tests).
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/report/report.h"
#include "core/scan/command.h"
#include "core/scan/scan.h"

namespace batchcheck {

// What one run reads and writes, for the guard below: an input by its path and what it is ("the
// config", "part 2"); an output by its path and the flag that named it ("-o", "--html").
struct RunFile {
  std::string path, what;
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
// Throws InputError unless `what` (the report, a view, the log) can be written at `path`;
// `flag` is the error's where.
void check_writable(const std::string& path, const std::string& flag = "", const std::string& what = "the report");

}  // namespace batchcheck
