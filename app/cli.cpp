#include "cli.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "core/base/errors.h"
#include "core/base/escape.h"
#include "core/base/info.h"
#include "core/base/json_input.h"
#include "core/base/log.h"
#include "core/base/text.h"
#include "core/command/scan_setup.h"
#include "core/journal/merge.h"
#include "core/journal/shard.h"
#include "core/plan/suggest.h"
#include "core/report/catalog.h"
#include "core/views/summary.h"
#include "core/views/views.h"
#include "engine/scan_command.h"
#include "scan_entry.h"

#include <unistd.h>

namespace batchcheck {

namespace {

const std::vector<std::string> kCommands = {"scan", "suggest", "explain", "render", "merge"};

uint64_t parse_count(const std::string& flag, const std::string& text, uint64_t min_value) {
  auto v = parse_u64(text);
  if (!v) {
    bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
    if (digits) throw InputError("", flag, text + " is larger than 18446744073709551615 (2^64-1)");
    throw InputError("", flag, "expected " + std::string(min_value ? "a positive" : "a non-negative") +
                                   " integer, got \"" + text + "\"");
  }
  if (*v < min_value) throw InputError("", flag, "expected a positive integer, got " + text);
  return *v;
}

// Seconds: a non-negative decimal number, at most a week.
double parse_seconds(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !(v >= 0) || v > 604800) {
    throw InputError("", flag, "expected seconds (a number from 0 to 604800; 0 = no limit), got \"" + text + "\"");
  }
  return v;
}

// The views a scan or render writes: --junit, --markdown, --github; on GitHub Actions
// (GITHUB_ACTIONS=true) the workflow commands and the step summary come without asking.
struct ViewArgs {
  std::string junit, markdown, html;
  bool github = false;
  bool text = false;  // render only: the summary scan prints
};

ViewTargets view_targets(const ViewArgs& a) {
  ViewTargets v;
  if (!a.junit.empty()) v.junit = a.junit;
  if (!a.markdown.empty()) v.markdown = a.markdown;
  if (!a.html.empty()) v.html = a.html;
  const char* actions = std::getenv("GITHUB_ACTIONS");
  v.github = a.github || (actions && std::string(actions) == "true");
  if (const char* summary = std::getenv("GITHUB_STEP_SUMMARY"); v.github && summary && *summary) v.github_summary = summary;
  return v;
}

void add_view_options(CLI::App* cmd, ViewArgs& a) {
  cmd->add_option("--junit", a.junit, "also write the report as JUnit XML to FILE (a testcase per check, per rank)")->type_name("FILE");
  cmd->add_option("--markdown", a.markdown, "also write a markdown summary to FILE (verdict, findings, fixes)")->type_name("FILE");
  cmd->add_option("--html", a.html,
                  "also write a self-contained HTML report to FILE (verdict, batch strip, per-batch plots, findings with fixes)")
      ->type_name("FILE");
  cmd->add_flag("--github", a.github,
                "print GitHub Actions annotations on stderr and append the summary to $GITHUB_STEP_SUMMARY "
                "(automatic when GITHUB_ACTIONS=true)");
}

// `batchcheck render REPORT.json`: the views of a saved report; markdown on stdout when no
// view is asked for.
int run_render(const std::string& path, const ViewArgs& a, std::ostream& out, std::ostream& err) {
  // Keeping the key order, so `render` prints what `scan` printed (evidence objects).
  const nlohmann::ordered_json report = read_ordered_json_file(path, path);
  require_report(report, path);
  ViewTargets v = view_targets(a);
  refuse_clobbering(view_outputs(v), {{path, "the report being rendered"}});
  try {
    if (a.text) {
      // What `scan` printed, from the report alone (batchcheck.scan() re-renders it after it
      // tried the fixes).
      ScanResult r;
      r.report = report;
      r.complete = report.value("complete", true);
      for (const auto& f : report.at("findings")) r.findings.push_back(finding_from_json(f));
      out << format_summary(r);
      if (!v.any_file() && !v.github) return 0;
    }
    if (!v.any_file() && !v.github) {
      out << markdown_view(report);
      return 0;
    }
    deliver_views(v, report, err);
  } catch (const nlohmann::json::exception& e) {
    // A hand-edited or foreign report whose fields have other types than batchcheck writes.
    throw InputError(path, "", std::string("not a report this batchcheck can read: ") + e.what());
  }
  return 0;
}

struct ScanArgs {
  std::string config, output, fail_on = "error", device, mode, precision, half_headroom, max_batches, rank, threads, batch_timeout, shard,
      jobs = "auto", log_level, log_file;
  bool edges = false, quiet = false, verbose = false, no_backward = false, fail_fast = false;
  const CLI::Option* log_file_option = nullptr;  // given (even as "") or not
  ViewArgs views;
};

FailOn fail_on_of(const std::string& text) {
  auto fail_on = parse_fail_on(text);
  if (!fail_on) {
    throw InputError("", "--fail-on", "unknown level \"" + text + "\"" + did_you_mean(text, {"error", "warning", "info", "never"}) +
                                          " (expected error, warning, info or never)");
  }
  return *fail_on;
}

// --log-level and --log-file (-v is --log-level debug), in effect before anything else is said.
void set_up_log(const ScanArgs& a, ScanCommand& cmd) {
  if (!a.log_level.empty()) {
    const auto level = parse_log_level(a.log_level);
    if (!level) {
      throw InputError("", "--log-level", "unknown level \"" + a.log_level + "\"" +
                                              did_you_mean(a.log_level, {"debug", "info", "warn", "error"}) +
                                              " (expected debug, info, warn or error)");
    }
    cmd.log_level = *level;
  } else if (a.verbose) {
    cmd.log_level = LogLevel::debug;
  }
  set_log_level(cmd.log_level);
  if (a.log_file_option && a.log_file_option->count() > 0) {
    if (a.log_file.empty()) throw InputError("", "--log-file", "an empty path: name the file to append the log to");
    if (a.log_file == "-") throw InputError("", "--log-file", "\"-\" is not a file: the log's text lines are on stderr already");
    check_writable(a.log_file, "--log-file", "the log");
    cmd.log_file = a.log_file;
    set_log_file(a.log_file);
  }
}

int run_scan_cmd(const ScanArgs& a, std::ostream& out, std::ostream& err, bool interactive) {
  ScanCommand cmd;
  set_up_log(a, cmd);
  cmd.config_path = a.config;
  if (!a.output.empty()) cmd.output_path = a.output;
  cmd.fail_on = fail_on_of(a.fail_on);
  if (!a.shard.empty()) cmd.shard = resolve_shard(a.shard, [](const char* name) { return std::getenv(name); });
  if (!a.device.empty()) cmd.device = a.device;
  if (!a.mode.empty()) {
    if (a.mode != "train" && a.mode != "eval") {
      throw InputError("", "--mode", "unknown mode \"" + a.mode + "\" (expected train or eval)");
    }
    cmd.mode = a.mode == "train" ? Mode::Train : Mode::Eval;
  }
  if (!a.precision.empty()) {
    cmd.precision = parse_precision(a.precision);
    if (!cmd.precision) {
      throw InputError("", "--precision", "unknown precision \"" + excerpt(a.precision) + "\"" +
                                              did_you_mean(a.precision, {"fp32", "fp16", "bf16"}) + " (expected fp32, fp16 or bf16)");
    }
  }
  if (!a.half_headroom.empty()) {
    char* end = nullptr;
    const double share = std::strtod(a.half_headroom.c_str(), &end);
    if (end == a.half_headroom.c_str() || *end != '\0' || !(share > 0.0 && share <= 1.0)) {
      throw InputError("", "--half-headroom", "\"" + excerpt(a.half_headroom) + "\" is not a share of float16's range above 0 and at most 1 (e.g. 0.5)");
    }
    cmd.half_headroom = share;
  }
  if (!a.max_batches.empty()) cmd.max_batches = parse_count("--max-batches", a.max_batches, 0);
  if (!a.rank.empty()) cmd.rank = parse_count("--rank", a.rank, 0);
  if (!a.threads.empty()) {
    cmd.threads = parse_count("--threads", a.threads, 1);
    if (*cmd.threads > 1024) throw InputError("", "--threads", a.threads + " is more than 1024 intra-op threads");
  }
  if (a.jobs != "auto") {
    cmd.jobs = parse_count("--jobs", a.jobs, 1);
    if (*cmd.jobs > 64) throw InputError("", "--jobs", a.jobs + " is more than 64 engine processes");
    if (a.fail_fast && *cmd.jobs > 1) {
      throw InputError("", "--jobs", "--fail-fast runs as one job: its point is the first batches, in order of likely failure");
    }
    if (cmd.shard && *cmd.jobs > 1) {
      throw InputError("", "--jobs", "a shard runs as one job: start more shards instead (--shard K/N with a larger N)");
    }
  }
  if (!a.batch_timeout.empty()) cmd.batch_timeout = parse_seconds("--batch-timeout", a.batch_timeout);
  cmd.edges = a.edges;
  cmd.fail_fast = a.fail_fast;
  cmd.no_backward = a.no_backward;
  cmd.quiet = a.quiet;
  cmd.progress = interactive;
  cmd.views = view_targets(a.views);
  ScanOutcome o = run_scan_entry(cmd, out, err);
  if (!o.complete && o.signal) {
    if (o.report_written) {
      log_warn(std::string("interrupted by ") + (o.signal == SIGINT ? "SIGINT" : o.signal == SIGTERM ? "SIGTERM" : "a signal") +
               ": the report holds the batches checked so far (\"complete\": false)");
    }
    return 128 + o.signal;  // 130 for SIGINT, 143 for SIGTERM
  }
  // A shard's findings are judged by merge: a non-zero exit would make torchrun stop the rest.
  if (cmd.shard) return 0;
  return o.failed ? 1 : 0;
}

struct MergeArgs {
  std::vector<std::string> parts;
  std::string output, fail_on = "error";
  bool quiet = false;
  ViewArgs views;
};

// `batchcheck merge PART... -o REPORT.json`: the report an unsharded scan writes.
int run_merge(const MergeArgs& a, std::ostream& out, std::ostream& err) {
  MergeInput in;
  in.parts = a.parts;
  in.fail_on = fail_on_of(a.fail_on);
  ScanCommand cmd;
  if (!a.output.empty()) cmd.output_path = a.output;
  cmd.fail_on = in.fail_on;
  cmd.quiet = a.quiet;
  cmd.views = view_targets(a.views);
  std::vector<RunFile> parts;
  for (std::size_t i = 0; i < a.parts.size(); ++i) parts.push_back({a.parts[i], "part " + std::to_string(i + 1) + " being merged"});
  if (cmd.output_path && *cmd.output_path != "-") check_writable(*cmd.output_path);
  check_view_targets(cmd.views);
  refuse_clobbering(scan_outputs(cmd), parts);
  std::ostringstream progress;
  std::vector<std::string> read;
  in.files_read = &read;
  ScanResult result = merge_parts(in, progress);
  // The parts were checked above; what merge read besides them is known only now.
  std::vector<RunFile> order;
  for (const auto& f : read) order.push_back({f, "the recorded order (loader.order) of the parts' config"});
  refuse_clobbering(scan_outputs(cmd), order);
  deliver_report(cmd, result, out, err);
  return result.failed ? 1 : 0;
}

struct SuggestArgs {
  std::string samples, batch_size, world_size = "1", accumulation = "1", min_tail = "2";
  std::vector<std::string> divides, multiple_of;
  bool drop_last = false, sampler_drop_last = false, json = false;
};

int run_suggest(const SuggestArgs& a, std::ostream& out) {
  SuggestRequest r;
  r.samples = parse_count("--samples", a.samples, 0);
  r.batch_size = parse_count("--batch-size", a.batch_size, 1);
  r.world_size = parse_count("--world-size", a.world_size, 1);
  r.accumulation_steps = parse_count("--accumulation", a.accumulation, 1);
  r.min_tail = parse_count("--min-tail", a.min_tail, 0);
  r.drop_last = a.drop_last;
  r.sampler_drop_last = a.sampler_drop_last;
  for (const std::string& k : a.divides) r.divides.push_back(parse_count("--divides", k, 1));
  for (const std::string& m : a.multiple_of) r.multiple_of.push_back(parse_count("--multiple-of", m, 1));
  Suggestion s = suggest(r);
  if (a.json) {
    out << to_json(s).dump(2) << "\n";
  } else {
    out << format_table(s);
  }
  return 0;
}

// Progress is drawn only on a real terminal, never into a captured stream.
// A flag given an empty value (--precision "", --half-headroom "") is a mistake of the command
// line, refused as a malformed one is, never taken for the flag's absence.
void refuse_empty_values(const CLI::App& app) {
  for (const CLI::App* cmd : app.get_subcommands()) {
    for (const CLI::Option* opt : cmd->get_options()) {
      // --log-file says what it needs in its own words (set_up_log).
      if (opt->count() == 0 || opt->get_type_size() == 0 || opt->get_name() == "--log-file") continue;
      for (const std::string& value : opt->results()) {
        if (value.empty()) {
          throw InputError("", opt->get_name(), "an empty value: give one (see 'batchcheck " + cmd->get_name() + " --help')");
        }
      }
    }
  }
}

bool stderr_is_terminal(const std::ostream& err) { return &err == &std::cerr && ::isatty(STDERR_FILENO); }

// "unknown command "scna"; did you mean "scan"?" before CLI11's generic message.
void check_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0].empty() || args[0][0] == '-') return;
  for (const auto& c : kCommands) {
    if (args[0] == c) return;
  }
  std::string hint = did_you_mean(args[0], kCommands);
  if (hint.empty()) hint = " (commands: " + join(kCommands) + ")";
  throw InputError("", "", "unknown command \"" + args[0] + "\"" + hint);
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "batchcheck: catches the batch-shape and value-range errors that crash PyTorch training runs,\n"
      "before the run starts. It replays every batch exactly as DataLoader/DistributedSampler would\n"
      "deliver it through your TorchScript model and checks it against what the loss requires.",
      "batchcheck"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "batchcheck " + std::string(BATCHCHECK_VERSION) + " (LibTorch " +
                                        libtorch_version() + ")");
  app.footer(
      "Exit codes: 0 pass, 1 fail (findings at or above --fail-on), 2 unusable input, 3 internal error.\n"
      "Run 'batchcheck COMMAND --help' for the options of a command.");

  SuggestArgs sa;
  CLI::App* suggest_cmd = app.add_subcommand(
      "suggest", "Print the batch geometry of a loader setup and the batch sizes that avoid a tiny last batch.\n"
                 "Needs no model or data.");
  suggest_cmd->add_option("--samples", sa.samples, "dataset size N (0 .. 2^64-1)")->type_name("INT")->required();
  suggest_cmd->add_option("--batch-size", sa.batch_size, "requested batch size B")->type_name("INT")->required();
  suggest_cmd->add_option("--world-size", sa.world_size, "DistributedSampler num_replicas (default 1)")->type_name("INT");
  suggest_cmd->add_flag("--drop-last", sa.drop_last, "DataLoader(drop_last=True)");
  suggest_cmd->add_flag("--sampler-drop-last", sa.sampler_drop_last, "DistributedSampler(drop_last=True)");
  suggest_cmd->add_option("--accumulation", sa.accumulation, "gradient accumulation steps K (default 1)")->type_name("INT");
  suggest_cmd->add_option("--min-tail", sa.min_tail, "smallest acceptable partial last batch (default 2)")->type_name("INT");
  suggest_cmd->add_option("--divides", sa.divides,
                          "every batch must divide K, as a step asserting K % batch_size == 0 (a queue of K) asks; "
                          "repeatable")
      ->type_name("K");
  suggest_cmd->add_option("--multiple-of", sa.multiple_of,
                          "every batch must be a multiple of M, as a step that pairs samples (Mixup: 2) asks; repeatable")
      ->type_name("M");
  suggest_cmd->add_flag("--json", sa.json, "print one JSON object instead of a table");

  std::string explain_id;
  CLI::App* explain_cmd = app.add_subcommand(
      "explain", "What a finding id means: the PyTorch and CUDA errors it stands for, typical causes, the fixes\n"
                 "the report offers. Without an id, every id with its severity.");
  explain_cmd->add_option("id", explain_id, "a finding id from a report, e.g. target-out-of-range");

  ScanArgs sc;
  CLI::App* scan_cmd = app.add_subcommand(
      "scan", "Replay every batch of a training setup through its TorchScript model and check it against the loss.\n"
              "Writes the JSON report to stdout (or -o FILE); the summary and progress go to stderr.");
  scan_cmd->add_option("config", sc.config, "the JSON config (see README: model, data, loader, loss, checks)")->required();
  scan_cmd->add_option("-o,--output", sc.output, "write the report to FILE atomically instead of stdout");
  scan_cmd->add_option("--fail-on", sc.fail_on, "lowest severity that fails: error (default), warning, info, never");
  scan_cmd->add_option("--device", sc.device, "cpu, cuda, cuda:N or auto (overrides the config)");
  scan_cmd->add_option("--mode", sc.mode, "train or eval (overrides model.mode)");
  scan_cmd->add_option("--precision", sc.precision,
                       "fp32 (default), fp16 or bf16: forward and the loss run under torch.autocast with that dtype and "
                       "PyTorch's own op lists, as mixed-precision training runs them; a value past float16's 65,504 is "
                       "half-overflow (overrides the config's precision)")
      ->type_name("fp32|fp16|bf16");
  scan_cmd->add_option("--half-headroom", sc.half_headroom,
                       "warn (half-headroom) when an op's largest value in an fp16 scan reaches this share of 65,504 "
                       "(default 0.5)")
      ->type_name("SHARE");
  scan_cmd->add_flag("--edges", sc.edges, "only the first and last batch of each rank plus the probes: a fast gate");
  scan_cmd->add_flag("--fail-fast", sc.fail_fast,
                     "check the probes and every rank's first and last batch first, then the rest, and stop at the first "
                     "error (the report says how far it went: \"complete\": false)");
  scan_cmd->add_option("--max-batches", sc.max_batches, "stop after K batches per rank (0 = all)")->type_name("INT");
  scan_cmd->add_option("--rank", sc.rank, "check only this DistributedSampler rank")->type_name("INT");
  scan_cmd->add_option("--threads", sc.threads, "intra-op threads for LibTorch (with several jobs: shared among them)")
      ->type_name("INT");
  scan_cmd->add_option("--jobs", sc.jobs,
                       "engine processes side by side, each replaying every J-th batch with its share of the threads; "
                       "the report is the same. auto (default): one, split over the cores when its first batches leave "
                       "cores idle and the rest of the scan is long enough to pay for another start-up")
      ->type_name("J|auto");
  scan_cmd->add_option("--batch-timeout", sc.batch_timeout,
                       "a batch that takes longer is stopped and reported (forward-timeout); default: 10x the slowest "
                       "batch so far, at least 300; 0 = no limit")
      ->type_name("SECONDS");
  scan_cmd->add_flag("--no-backward", sc.no_backward,
                     "skip loss.backward() in train mode (overrides checks.backward; faster, misses backward-only errors)");
  scan_cmd->add_flag("-q,--quiet", sc.quiet, "no summary or progress bar on stderr (the log's lines stay: --log-level)");
  auto* verbose = scan_cmd->add_flag("-v,--verbose", sc.verbose, "log every batch (--log-level debug)");
  scan_cmd->add_option("--log-level", sc.log_level,
                       "the least that is logged, on stderr and in --log-file: debug (each batch), info (default: "
                       "also what the engine and the model print), warn (or warning), error")
      ->type_name("LEVEL")
      ->excludes(verbose);
  sc.log_file_option = scan_cmd->add_option("--log-file", sc.log_file,
                       "also append the diagnostics to FILE as JSON lines (time, level, source: batchcheck, engine or "
                       "model, message)")
      ->type_name("FILE");
  scan_cmd->add_option("--shard", sc.shard,
                       "scan one part of the batches and write a partial report (-o, {shard} in the path becomes K): K/N, "
                       "or env / env/N to read torchrun's RANK and WORLD_SIZE, a SLURM array's task id, or "
                       "JOB_COMPLETION_INDEX; batchcheck merge joins the parts")
      ->type_name("K/N|env[/N]");
  add_view_options(scan_cmd, sc.views);

  MergeArgs ma;
  CLI::App* merge_cmd = app.add_subcommand(
      "merge", "Join the partial reports of a sharded scan (batchcheck scan --shard K/N) into the report the whole scan\n"
               "writes. Checks that the parts come from the same config, model and data and cover every shard once.\n"
               "Exit codes as for scan: 0 pass, 1 fail, 2 bad input.");
  merge_cmd->add_option("parts", ma.parts, "the partial reports, one per shard, in any order")->required();
  merge_cmd->add_option("-o,--output", ma.output, "write the report to FILE atomically instead of stdout");
  merge_cmd->add_option("--fail-on", ma.fail_on, "lowest severity that fails: error (default), warning, info, never");
  merge_cmd->add_flag("-q,--quiet", ma.quiet, "no summary on stderr");
  add_view_options(merge_cmd, ma.views);

  std::string render_report;
  ViewArgs rv;
  CLI::App* render_cmd = app.add_subcommand(
      "render", "Write the views of a saved report (batchcheck scan -o REPORT.json): JUnit XML, markdown, HTML,\n"
                "GitHub annotations. Without a view option, prints the markdown summary. Exit 0 when rendered.");
  render_cmd->add_option("report", render_report, "the JSON report")->required();
  add_view_options(render_cmd, rv);
  render_cmd->add_flag("--text", rv.text, "print the summary 'scan' prints on stderr (instead of the markdown), on stdout");

  LogScope log_scope(err);  // the diagnostics go where this run's stderr is
  try {
    check_command(args);
    std::vector<const char*> argv{"batchcheck"};
    for (const auto& a : args) argv.push_back(a.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::CallForHelp&) {
      out << app.help();  // the selected subcommand's help, when there is one
      return 0;
    } catch (const CLI::CallForAllHelp&) {
      out << app.help("", CLI::AppFormatMode::All);
      return 0;
    } catch (const CLI::CallForVersion&) {
      out << app.version() << "\n";
      return 0;
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) {
        out << app.help();
        return 0;
      }
      log_error(std::string(e.what()) + " (see 'batchcheck --help')");
      return 2;
    }
    refuse_empty_values(app);
    if (suggest_cmd->parsed()) return run_suggest(sa, out);
    if (render_cmd->parsed()) return run_render(render_report, rv, out, err);
    if (merge_cmd->parsed()) return run_merge(ma, out, err);
    if (explain_cmd->parsed()) {
      out << (explain_id.empty() ? explain_all_text() : explain_text(explain_id));
      return 0;
    }
    if (scan_cmd->parsed()) return run_scan_cmd(sc, out, err, stderr_is_terminal(err));
    out << app.help();
    return 0;
  } catch (const InputError& e) {
    log_error(e.what());  // format_error's line, and the log file's record
    return 2;
  } catch (const std::bad_alloc&) {
    // A config or a file that slipped past the size bounds, or a tight ulimit: the machine's
    // limit, not a bug, and never a signal.
    log_error("out of memory: this command needed more memory than the process may take"
              " (ulimit -v, a container's limit); give it more, or scan with a smaller batch size");
    return 2;
  } catch (const std::exception& e) {
    err << "batchcheck: internal error: " << terminal_text(single_line(e.what())) << " (this is a bug in batchcheck; please report it)\n";
    return 3;
  }
}

}  // namespace batchcheck
