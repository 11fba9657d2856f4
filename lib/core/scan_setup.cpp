#include "core/scan_setup.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/shard.h"
#include "core/text.h"
#include "core/html_view.h"
#include "core/views.h"

namespace batchcheck {

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(path, "", "cannot write the report: the folder " + dir.string() + " does not exist");
  if (fs::is_directory(p, ec)) throw InputError(path, "", "cannot write the report: it is a directory");
  // Opening a FIFO for writing waits for a reader that may never come.
  if (fs::is_fifo(p, ec)) throw InputError(path, "", "cannot write the report: it is a FIFO; write to a regular file");
  if (::access(dir.c_str(), W_OK) != 0) {
    throw InputError(path, "", "cannot write the report: the folder " + dir.string() + " is not writable");
  }
}

void refuse_overwriting_inputs(const std::string& output, const std::string& config_path, const Config& cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(output, ec)) return;  // a new file cannot be one of the inputs
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {config_path, "the config"},         {cfg.model.path, "the model"},   {cfg.data.inputs, "the inputs"},
      {cfg.data.targets, "the targets"},   {cfg.data.path, "the data file"},
      {cfg.data.inputs_offsets, "the inputs' offsets"}, {cfg.data.targets_offsets, "the targets' offsets"}};
  for (const auto& [path, what] : inputs) {
    if (path.empty()) continue;
    if (fs::equivalent(output, path, ec) && !ec) {
      throw InputError(output, "-o", "is " + what + " of this scan: refusing to overwrite an input with the report");
    }
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    // /dev/null, a FIFO, a terminal: renaming over it would replace the device node.
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.flush();
    if (!out) throw InputError(path, "", std::string("cannot write the report: ") + std::strerror(errno));
    return;
  }
  // A short hidden name beside the report: fits beside any legal report name (NAME_MAX).
  std::filesystem::path target(path);
  const std::string tmp = (target.parent_path() / (".batchcheck-" + std::to_string(::getpid()) + ".tmp")).string();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "", std::string("cannot write the report: ") + std::strerror(errno));
    out << text;
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp);
      throw InputError(path, "", std::string("cannot write the report: ") + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::filesystem::remove(tmp);
    throw InputError(path, "", std::string("cannot write the report: ") + std::strerror(e));
  }
}

Config prepare_scan_config(const ScanCommand& cmd) {
  Config cfg = load_config(cmd.config_path);
  const bool to_file = cmd.output_path && *cmd.output_path != "-";
  if (cmd.shard && !cmd.shard->job()) {
    if (!to_file) throw InputError("", "--shard", "a shard writes a partial report: give -o PART.json ({shard} in the path becomes the shard's index)");
    if (cmd.views.junit || cmd.views.markdown || cmd.views.html) {
      throw InputError("", "--shard", "a shard writes only its part: write the views from the merged report (batchcheck merge PART... --junit FILE)");
    }
    const std::string part = shard_output_path(*cmd.output_path, *cmd.shard);
    check_writable(part);
    refuse_overwriting_inputs(part, cmd.config_path, cfg);
  } else if (to_file) {
    check_writable(*cmd.output_path);
    refuse_overwriting_inputs(*cmd.output_path, cmd.config_path, cfg);
  }
  check_view_targets(cmd.views);
  for (const auto& view : {cmd.views.junit, cmd.views.markdown, cmd.views.html}) {
    if (view) refuse_overwriting_inputs(*view, cmd.config_path, cfg);
  }

  // Command-line flags override the config.
  if (cmd.device) {
    if (!valid_device(*cmd.device)) {
      throw InputError("", "--device", "unknown device \"" + *cmd.device + "\" (expected cpu, cuda, cuda:N or auto)");
    }
    cfg.device = *cmd.device;
  }
  if (cmd.mode) {
    if (cfg.model.format == ModelFormat::Pt2 && *cmd.mode == Mode::Train) throw InputError("", "--mode train", kPt2NoTrain);
    cfg.model.mode = *cmd.mode;
  }
  if (cmd.max_batches) cfg.checks.max_batches = *cmd.max_batches;
  if (cmd.no_backward) cfg.checks.backward = false;

  return cfg;
}

ScanSettings scan_settings(const ScanCommand& cmd) {
  ScanSettings settings;
  settings.fail_on = cmd.fail_on;
  settings.edges = cmd.edges;
  settings.fail_fast = cmd.fail_fast;
  settings.rank = cmd.rank;
  settings.verbosity = cmd.verbosity;
  settings.progress = cmd.progress;
  settings.shard = cmd.shard;
  return settings;
}

void deliver_report(const ScanCommand& cmd, const ScanResult& result, std::ostream& out, std::ostream& err) {
  if (cmd.shard) {
    // A shard writes its part only; `merge` judges the whole (a non-zero exit would make
    // torchrun stop the other shards).
    const std::string path = shard_output_path(cmd.output_path.value_or("-"), *cmd.shard);
    write_file_atomically(path, result.partial.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
    if (cmd.verbosity >= 0) {
      err << "batchcheck: shard " << cmd.shard->index << "/" << cmd.shard->count << " (" << cmd.shard->source << "): checked "
          << plural(result.batches_checked, "batch", "batches") << ", wrote " << path
          << "; batchcheck merge joins the parts into the report\n";
    }
    return;
  }
  // Invalid UTF-8 (a file name, a model's own error text) is replaced, never an exception.
  const std::string text = result.report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  if (cmd.output_path && *cmd.output_path != "-") {
    write_file_atomically(*cmd.output_path, text);
  } else {
    out << text << std::flush;
    // stdout closed or full: a gate whose report was lost must not pass.
    if (!out) throw InputError("<stdout>", "", "cannot write the report (standard output is closed or full); use -o FILE");
  }
  deliver_views(cmd.views, result.report, err);
  if (cmd.verbosity >= 0) err << format_summary(result);
}

void check_view_targets(const ViewTargets& v) {
  if (v.junit) check_writable(*v.junit);
  if (v.markdown) check_writable(*v.markdown);
  if (v.html) check_writable(*v.html);
}

void refuse_overwriting_report(const ViewTargets& v, const std::string& report) {
  namespace fs = std::filesystem;
  for (const auto& [view, flag] : {std::pair{v.junit, "--junit"}, {v.markdown, "--markdown"}, {v.html, "--html"}}) {
    std::error_code ec;
    if (view && fs::exists(*view, ec) && fs::equivalent(*view, report, ec) && !ec) {
      throw InputError(*view, flag, "is the report being rendered: refusing to overwrite it");
    }
  }
}

void deliver_views(const ViewTargets& v, const nlohmann::ordered_json& report, std::ostream& err) {
  if (v.junit) write_file_atomically(*v.junit, junit_view(report));
  if (v.markdown) write_file_atomically(*v.markdown, markdown_view(report));
  if (v.html) write_file_atomically(*v.html, html_view(report));
  if (!v.github) return;
  for (const auto& line : github_commands(report)) err << line << "\n";
  if (!v.github_summary || v.github_summary->empty()) return;
  // GitHub takes 1 MiB of step summary per step: what the step wrote before counts.
  constexpr std::uintmax_t kLimit = 1024 * 1024, kMargin = 4096;
  std::error_code ec;
  const std::uintmax_t used = std::filesystem::exists(*v.github_summary, ec) ? std::filesystem::file_size(*v.github_summary, ec) : 0;
  if (ec || used + kMargin >= kLimit) {
    err << "batchcheck: warning: " << *v.github_summary << " ($GITHUB_STEP_SUMMARY) has no room left for the summary\n";
    return;
  }
  std::ofstream out(*v.github_summary, std::ios::app | std::ios::binary);
  out << markdown_view(report, static_cast<std::size_t>(kLimit - kMargin - used)) << "\n";
  if (!out) throw InputError(*v.github_summary, "$GITHUB_STEP_SUMMARY", std::string("cannot append the summary: ") + std::strerror(errno));
}

}  // namespace batchcheck
