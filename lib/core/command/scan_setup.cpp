#include "core/command/scan_setup.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <fcntl.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "core/base/errors.h"
#include "core/base/escape.h"
#include "core/base/files.h"
#include "core/base/log.h"
#include "core/base/text.h"
#include "core/journal/shard.h"
#include "core/views/html_view.h"
#include "core/views/summary.h"
#include "core/views/views.h"

namespace batchcheck {

void check_writable(const std::string& path, const std::string& flag, const std::string& what) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  const std::string cannot = "cannot write " + what + ": ";
  if (!fs::is_directory(dir, ec)) throw InputError(path, flag, cannot + "the folder " + dir.string() + " does not exist");
  if (fs::is_directory(p, ec)) throw InputError(path, flag, cannot + "it is a directory");
  // Opening a FIFO for writing waits for a reader that may never come.
  if (fs::is_fifo(p, ec)) throw InputError(path, flag, cannot + "it is a FIFO; write to a regular file");
  if (::access(dir.c_str(), W_OK) != 0) throw InputError(path, flag, cannot + "the folder " + dir.string() + " is not writable");
}

namespace {

namespace fs = std::filesystem;

// Whether two paths name one file: the same inode where both exist (a symlink or a hard link
// to it included); else the same path once symlinks and dots are resolved (two outputs not
// written yet).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  const bool a_exists = fs::exists(a, ec), b_exists = fs::exists(b, ec);
  if (a_exists && b_exists) {
    const bool eq = fs::equivalent(a, b, ec);
    return !ec && eq;
  }
  if (a_exists != b_exists) return false;
  const fs::path ca = fs::weakly_canonical(a, ec);
  if (ec) return false;
  const fs::path cb = fs::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

// Whether `path` lies inside the folder `root` (resolved), or is a hard link to a file in it.
bool inside_folder(const std::string& path, const std::string& root) {
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(root, ec);
  if (ec || r.empty()) return false;
  const fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  auto pi = p.begin();
  bool under = true;
  for (auto ri = r.begin(); ri != r.end() && under; ++ri, ++pi) under = pi != p.end() && *pi == *ri;
  if (under && pi != p.end()) return true;
  // A file that exists may be a member by another name: a hard link, or the target of a link
  // inside the folder (the listing follows linked files and folders, as ImageFolder does).
  if (!fs::exists(path, ec) || ec) return false;
  const auto opts = fs::directory_options::skip_permission_denied | fs::directory_options::follow_directory_symlink;
  for (fs::recursive_directory_iterator it(r, opts, ec), end; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 64) it.disable_recursion_pending();  // a folder linked into itself
    std::error_code e2;
    if (it->is_regular_file(e2) && fs::equivalent(it->path(), path, e2) && !e2) return true;
  }
  return false;
}

}  // namespace

std::vector<RunFile> scan_inputs(const std::string& config_path, const Config& cfg) {
  std::vector<RunFile> in = {{config_path, "the config"},
                             {cfg.model.path, "the model"},
                             {cfg.loader.order_path, "the recorded order (loader.order)"}};
  // A stream's path is the socket of the Python process serving the batches, not a file.
  if (cfg.data.format != DataFormat::ImageFolder && cfg.data.format != DataFormat::Stream) {
    in.push_back({cfg.data.path, "the data file"});
  }
  // An image folder's or a .pt file's `inputs`/`targets` name fields, not files.
  if (cfg.data.format == DataFormat::Npy) {
    in.insert(in.end(), {{cfg.data.inputs, "the inputs"},
                         {cfg.data.targets, "the targets"},
                         {cfg.data.inputs_offsets, "the inputs' offsets"},
                         {cfg.data.targets_offsets, "the targets' offsets"}});
  }
  for (const auto& lib : cfg.model.libraries) in.push_back({lib, "an operator library of the model (model.libraries)"});
  for (std::size_t i = 0; i < cfg.data.field_files.size(); ++i) {
    in.push_back({cfg.data.field_files[i], "the data file of field " + cfg.data.field_names.at(i)});
  }
  for (std::size_t i = 0; i < cfg.data.field_offsets.size(); ++i) {
    in.push_back({cfg.data.field_offsets[i], "an offsets file of the data"});
  }
  return in;
}

namespace {

// The views written to files, in one table: the outputs guard, the writability check and the
// delivery all read it.
struct FileView {
  const char* flag;
  std::optional<std::string> ViewTargets::*path;
  std::string (*render)(const nlohmann::ordered_json& report);
};
std::string markdown_file(const nlohmann::ordered_json& report) { return markdown_view(report); }
constexpr FileView kFileViews[] = {
    {"--junit", &ViewTargets::junit, junit_view},
    {"--markdown", &ViewTargets::markdown, markdown_file},
    {"--html", &ViewTargets::html, html_view},
};

}  // namespace

std::vector<RunFile> view_outputs(const ViewTargets& v) {
  std::vector<RunFile> out;
  for (const FileView& f : kFileViews) {
    if (v.*f.path) out.push_back({*(v.*f.path), f.flag});
  }
  if (v.github && v.github_summary && !v.github_summary->empty()) out.push_back({*v.github_summary, "$GITHUB_STEP_SUMMARY"});
  return out;
}

std::vector<RunFile> scan_outputs(const ScanCommand& cmd) {
  std::vector<RunFile> out;
  if (cmd.output_path && *cmd.output_path != "-") {
    out.push_back({cmd.shard && !cmd.shard->job() ? shard_output_path(*cmd.output_path, *cmd.shard) : *cmd.output_path, "-o"});
  }
  for (auto& v : view_outputs(cmd.views)) out.push_back(std::move(v));
  if (cmd.log_file) out.push_back({*cmd.log_file, "--log-file"});
  return out;
}

void refuse_clobbering(const std::vector<RunFile>& outputs, const std::vector<RunFile>& inputs, const std::string& image_root) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const RunFile& o = outputs[i];
    for (const RunFile& in : inputs) {
      if (!in.path.empty() && same_file(o.path, in.path)) {
        if (o.what == "--log-file") drop_log_file();
        throw InputError(o.path, o.what, "is " + in.what + ", an input of this run: refusing to overwrite it");
      }
    }
    if (!image_root.empty() && inside_folder(o.path, image_root)) {
      throw InputError(o.path, o.what, "is inside the image folder " + image_root +
                                           " of this scan: refusing to write into the dataset (write the report elsewhere)");
    }
    for (std::size_t k = 0; k < i; ++k) {
      if (same_file(o.path, outputs[k].path)) {
        if (o.what == "--log-file" || outputs[k].what == "--log-file") drop_log_file();  // not even this error
        throw InputError(o.path, o.what, "is also the file of " + outputs[k].what + ": two outputs of one run cannot share a file");
      }
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
    // A new file, never one that is there: a link planted under this name (a shared folder)
    // would otherwise have its target truncated. A leftover of an earlier crash is removed
    // (the link itself, not what it points at).
    auto create = [&] { return ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644); };
    int fd = create();
    if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = create();
    if (fd < 0) throw InputError(path, "", std::string("cannot write the report: ") + std::strerror(errno));
    if (const int e = write_all(fd, text)) {
      ::close(fd);
      std::filesystem::remove(tmp);
      throw InputError(path, "", std::string("cannot write the report: ") + std::strerror(e));
    }
    if (::close(fd) != 0) {
      const int e = errno;
      std::filesystem::remove(tmp);
      throw InputError(path, "", std::string("cannot write the report: ") + std::strerror(e));
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
    if (cmd.views.any_file()) {
      throw InputError("", "--shard", "a shard writes only its part: write the views from the merged report (batchcheck merge PART... --junit FILE)");
    }
    check_writable(shard_output_path(*cmd.output_path, *cmd.shard));
  } else if (to_file) {
    check_writable(*cmd.output_path);
  }
  check_view_targets(cmd.views);
  refuse_clobbering(scan_outputs(cmd), scan_inputs(cmd.config_path, cfg),
                    cfg.data.format == DataFormat::ImageFolder ? cfg.data.path : std::string());
  open_log_file();  // no input of the run is the log file: it may be written now

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
  if (cmd.precision) {
    if (cfg.model.format == ModelFormat::Pt2 && *cmd.precision != Precision::Fp32) {
      throw InputError("", "--precision " + std::string(to_string(*cmd.precision)), kPt2NoPrecision);
    }
    cfg.precision.dtype = *cmd.precision;
    cfg.precision.recorded = false;  // the flag asks the engine to run it so
    cfg.precision.from = "--precision";
  }
  if (cmd.half_headroom) cfg.checks.half_headroom = *cmd.half_headroom;
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
  settings.quiet = cmd.quiet;
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
    if (!cmd.quiet) {
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
  if (!cmd.quiet) err << format_summary(result);
}

void check_view_targets(const ViewTargets& v) {
  for (const FileView& f : kFileViews) {
    if (v.*f.path) check_writable(*(v.*f.path));
  }
}

void deliver_views(const ViewTargets& v, const nlohmann::ordered_json& report, std::ostream& err) {
  for (const FileView& f : kFileViews) {
    if (v.*f.path) write_file_atomically(*(v.*f.path), f.render(report));
  }
  if (!v.github) return;
  for (const auto& line : github_commands(report)) err << line << "\n";
  if (!v.github_summary || v.github_summary->empty()) return;
  // GitHub takes 1 MiB of step summary per step: what the step wrote before counts.
  constexpr std::uintmax_t kLimit = 1024 * 1024, kMargin = 4096;
  std::error_code ec;
  const std::uintmax_t used = std::filesystem::exists(*v.github_summary, ec) ? std::filesystem::file_size(*v.github_summary, ec) : 0;
  if (ec || used + kMargin >= kLimit) {
    log_warn(*v.github_summary + " ($GITHUB_STEP_SUMMARY) has no room left for the summary");
    return;
  }
  // The runner's own file: never through a link (a dangling one would land where it points,
  // past the output checks).
  const int fd = ::open(v.github_summary->c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  const std::string text = markdown_view(report, static_cast<std::size_t>(kLimit - kMargin - used)) + "\n";
  const int e = fd < 0 ? errno : write_all(fd, text);
  if (fd >= 0) ::close(fd);
  if (e) throw InputError(*v.github_summary, "$GITHUB_STEP_SUMMARY", std::string("cannot append the summary: ") + std::strerror(e));
}

}  // namespace batchcheck
