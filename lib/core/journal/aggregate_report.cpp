// The Aggregator's second half: the report from the findings it kept. Probe findings weighed
// against the sizes the loader delivers, the model's own root cause, the fixes, the geometry
// findings, then the report JSON with its suggestions and notes (aggregate.cpp: the events).
#include <cmath>
#include <algorithm>

#include "core/base/text.h"
#include "core/findings/findings.h"
#include "core/findings/fixes.h"
#include "core/journal/aggregate.h"
#include "core/journal/shard.h"
#include "core/pipeline/model_findings.h"
#include "core/plan/suggest.h"
#include "core/report/catalog.h"

namespace batchcheck {

namespace {

nlohmann::ordered_json shapes_json(const BatchShapes& b) {
  auto shape = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.shape) : nlohmann::ordered_json(); };
  return {{"index", b.index},
          {"size", b.size},
          {"input_shape", shape(b.input)},
          {"output_shape", shape(b.output)},
          {"target_shape", shape(b.target)}};
}

}  // namespace

void Aggregator::finish_findings() {
  const Geometry g = compute_geometry(loader_spec(cfg_.loader, start_.data.samples));
  const std::vector<uint64_t> produced = produced_sizes(g);
  // A probe that only repeats what the replay already found adds nothing.
  std::vector<std::string> replay_ids;
  for (const auto& f : findings_) {
    if (!f.probe) replay_ids.push_back(f.id);
  }
  std::vector<Finding> kept;
  std::vector<std::vector<int64_t>> kept_batches;
  for (std::size_t i = 0; i < findings_.size(); ++i) {
    Finding& f = findings_[i];
    if (f.probe && std::find(replay_ids.begin(), replay_ids.end(), f.id) != replay_ids.end()) continue;
    // A bad value in the data (NaN, a label past the classes) does not depend on the batch's
    // size: whichever batch holds the sample trains on it, so a probe's stays what it is.
    const FindingInfo* info = find_finding(f.id);
    const bool data_value = info && (std::string(info->stage) == "data" || std::string(info->stage) == "target");
    if (f.probe && !data_value && std::find(produced.begin(), produced.end(), f.probe_size) == produced.end()) {
      // The loader never delivers this size: a fragile model, not a failing setup. BatchNorm on
      // a batch of one is true of nearly every BatchNorm network: information about the model,
      // not a warning on every clean scan (--fail-on warning gates).
      f.severity = f.id == "batchnorm-single-value" ? Severity::Info : Severity::Warning;
      std::vector<std::string> sizes;
      for (uint64_t p : produced) sizes.push_back(std::to_string(p));
      f.message += "; the configured loader never delivers a batch of " + std::to_string(f.probe_size) +
                   (sizes.empty() ? std::string(" (it delivers no batch)") : " (its batches hold " + join(sizes, " or ") + " samples)") +
                   ", so training does not hit this now";
      if (f.probe_size < g.spec.batch_size && !g.recorded()) {
        f.message += "; it would with " + plural(f.probe_size, "sample") + " left over per rank, e.g. a dataset of " +
                     std::to_string(dataset_size_for_tail(g, f.probe_size)) + " samples" +
                     (g.spec.drop_last ? " with drop_last=False" : "");
      }
      f.evidence["delivered_batch_sizes"] = produced;
    }
    kept.push_back(std::move(f));
    kept_batches.push_back(std::move(first_batch_[i]));
  }
  findings_ = std::move(kept);
  first_batch_ = std::move(kept_batches);
  // NaN that came from the model's own weights: each batch's NaN names them.
  const nlohmann::ordered_json cause = model_root_cause(start_.model, cfg_.model.mode);
  for (Finding& f : findings_) {
    if (f.root_cause.is_object() && f.root_cause.value("summary", nlohmann::ordered_json()).is_string()) {
      f.message += "; " + f.root_cause["summary"].get<std::string>();
    }
    if (cause.is_null() || f.id == "model-nonfinite") continue;
    if (f.id == "output-nonfinite" || f.id == "loss-nonfinite" || f.id == "gradient-nonfinite") {
      f.root_cause = cause;
      f.message += "; root cause: " + cause["summary"].get<std::string>();
    }
  }

  FixContext fc;
  fc.geometry = &g;
  fc.loss = cfg_.loss;
  fc.mode = cfg_.model.mode;
  fc.backward = start_.backward;
  fc.output = cfg_.model.output;
  fc.collate_pads = cfg_.loader.collate.pads();
  fc.collate_list = cfg_.loader.collate.list;
  fc.collate_fn = cfg_.loader.collate_fn;
  fc.call = start_.model.call;
  if (cfg_.precision.dtype != Precision::Fp32 && !cfg_.precision.recorded) {
    fc.autocast_dtype = dtype_name(cfg_.precision.dtype);
    fc.autocast_device = start_.device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  }
  for (std::size_t i = 0; i < findings_.size(); ++i) {
    fc.batch_indices = first_batch_[i];
    if (findings_[i].fixes.empty()) attach_fixes(findings_[i], fc);
  }
  const auto& bn = start_.model.batchnorm_modules;
  for (Finding f : start_.geometry) {
    if (f.id == "tail-batch-singleton" && !f.occurrences.empty() && f.batch) {
      // What the replay ran is no longer a risk: say that it ran. The warning stays for a
      // batch of one the scan did not run (a rank, a --max-batches cut) or that failed.
      bool all_clean = true;
      for (const auto& o : f.occurrences) {
        const auto it = ran_clean_.find({o.rank.value_or(0), o.batch.value_or(*f.batch)});
        all_clean = all_clean && it != ran_clean_.end() && it->second;
      }
      if (all_clean && f.occurrences.size() == f.occurrences_total) {
        f.severity = Severity::Info;
        const std::string::size_type cut = f.message.find("; BatchNorm in train mode");
        if (cut != std::string::npos) f.message.resize(cut);
        f.message += std::string("; it ran through forward, the loss") + (start_.backward ? " and backward" : "") +
                     " in this scan without an error";
        f.evidence["ran_clean"] = true;
      }
    }
    if (f.id == "tail-batch-singleton" && !bn.empty() && f.severity != Severity::Info) {
      f.message += "; the model has BatchNorm (" + bn.front() +
                   (bn.size() > 1 ? " and " + std::to_string(bn.size() - 1) + " more" : "") + ")";
    }
    findings_.push_back(std::move(f));
  }
}

// A traced archive runs BatchNorm and dropout in the mode it was traced in: say so when
// the scan asks for the other one, since train-mode values then cannot show (BatchNorm on one
// value per channel is inferred per batch: Replayer::check_batchnorm_stats).
void Aggregator::mode_findings() {
  const bool train = cfg_.model.mode == Mode::Train;
  const FrozenModeOps& frozen = train ? start_.model.frozen_eval : start_.model.frozen_train;
  if (frozen.total() == 0) return;
  std::vector<std::string> ops;
  if (frozen.batch_norm) ops.push_back(plural(frozen.batch_norm, "batch_norm op", "batch_norm ops"));
  if (frozen.dropout) ops.push_back(plural(frozen.dropout, "dropout op", "dropout ops"));
  const char* traced_in = train ? "eval" : "train";
  Finding f;
  f.id = "trace-mode-mismatch";
  f.severity = default_severity(f.id);
  f.stage = "model";
  f.message = "the model was traced in " + std::string(traced_in) + " mode: " + join(ops, " and ") +
              (frozen.total() == 1 ? " has" : " have") + " training=" + (train ? "False" : "True") + " frozen into the graph, so mode \"" + to_string(cfg_.model.mode) +
              "\" has no effect on them" +
              (train ? "; BatchNorm uses its running statistics and dropout is off, so what only train mode "
                       "computes cannot show in this replay (a batch that gives BatchNorm one value per channel is "
                       "still found, from the shapes the frozen ops see)"
                     : "; BatchNorm normalizes with batch statistics and updates them, and dropout stays on");
  f.evidence = {{"traced_in", traced_in},
                {"scan_mode", to_string(cfg_.model.mode)},
                {"frozen_batch_norm_ops", frozen.batch_norm},
                {"frozen_dropout_ops", frozen.dropout}};
  findings_.push_back(std::move(f));
  first_batch_.emplace_back();
}

ScanResult Aggregator::result(const ScanEnd& end) {
  ScanResult result;
  result.complete = end.complete;
  if (start_.replay_steps) progress(true);
  finish_findings();
  std::stable_sort(findings_.begin(), findings_.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    if (a.probe != b.probe) return !a.probe;
    return false;
  });

  const DatasetInfo& data = start_.data;
  const LoaderSpec spec = loader_spec(cfg_.loader, data.samples);
  const Geometry g = compute_geometry(spec);
  result.findings = findings_;
  result.batches_checked = done_.load();
  result.failed = verdict_fails(findings_, settings_.fail_on);
  nlohmann::ordered_json& r = result.report;
  r["schema_version"] = 1;
  r["tool"] = {{"name", "batchcheck"}, {"version", BATCHCHECK_VERSION}, {"libtorch", start_.libtorch}};
  r["config"] = cfg_.file;
  if (!cfg_.source.empty()) r["source"] = cfg_.source;
  r["complete"] = result.complete;
  if (end.stopped_at_error) r["stopped_at_first_error"] = true;  // --fail-fast
  r["verdict"] = result.failed ? "fail" : "pass";
  r["fail_on"] = to_string(settings_.fail_on);
  r["device"] = start_.device;
  r["mode"] = to_string(cfg_.model.mode);
  r["loss"] = {{"type", to_string(cfg_.loss.type)}};
  r["sync"] = cfg_.sync;
  r["backward"] = start_.backward;
  auto meta_shape = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.shape) : nlohmann::ordered_json(); };
  auto meta_dtype = [](const TensorMeta& m) { return m.present ? nlohmann::ordered_json(m.dtype) : nlohmann::ordered_json(); };
  r["dataset"] = {{"samples", data.samples},
                  {"input_shape", meta_shape(data.input)},
                  {"input_dtype", meta_dtype(data.input)},
                  {"target_shape", meta_shape(data.target)},
                  {"target_dtype", meta_dtype(data.target)}};
  r["geometry"] = {{"batch_size", spec.batch_size},
                   {"drop_last", spec.drop_last},
                   {"sampler", cfg_.loader.order ? "recorded" : to_string(cfg_.loader.sampler)},
                   {"shuffle", spec.shuffle},
                   {"seed", spec.seed},
                   {"epoch", spec.epoch},
                   {"world_size", spec.world_size},
                   {"sampler_drop_last", spec.sampler_drop_last},
                   {"samples_per_rank", g.samples_per_rank},
                   {"batches_per_rank", g.batches_per_rank},
                   {"last_batch_size", g.last_batch_size},
                   {"padded_samples", g.delivered_padding()},
                   {"dropped_samples", g.dropped_total()},
                   {"accumulation_steps", spec.accumulation_steps},
                   {"pytorch_equivalent", pytorch_loader_call(cfg_.loader)}};
  if (cfg_.loader.order) r["geometry"]["order"] = cfg_.loader.order->display;
  if (spec.accumulation_steps > 1) {
    r["geometry"]["accumulation_windows"] = g.windows;
    r["geometry"]["last_window_batches"] = g.last_window_batches;
  }
  // A rank's number in the report is the user's (LoaderSpec::rank_id).
  std::vector<uint64_t> rank_ids;
  for (uint64_t i : start_.ranks) rank_ids.push_back(spec.rank_id(i));
  r["batches"] = {{"checked", done_.load()},
                  {"ranks", rank_ids},
                  {"first", first_ ? shapes_json(*first_) : nlohmann::ordered_json()},
                  {"last", last_ ? shapes_json(*last_) : nlohmann::ordered_json()}};
  r["series"] = series_.to_json(rank_ids);
  r["findings"] = nlohmann::ordered_json::array();
  for (const auto& f : findings_) {
    nlohmann::ordered_json j = to_json(f);
    if (spec.share) {
      auto relabel = [&](nlohmann::ordered_json& v) {
        if (v.is_number_unsigned()) v = spec.rank_id(v.get<uint64_t>());
      };
      relabel(j["rank"]);
      if (j.contains("ranks")) for (auto& v : j["ranks"]) relabel(v);
      if (j.contains("occurrences")) for (auto& o : j["occurrences"]) relabel(o["rank"]);
    }
    r["findings"].push_back(std::move(j));
  }
  SuggestRequest sr;
  sr.samples = data.samples;
  sr.batch_size = spec.batch_size;
  sr.world_size = spec.world_size;
  sr.sampler_drop_last = spec.sampler_drop_last;
  Suggestion sug = suggest(sr);
  nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
  for (const auto& c : sug.nearest) {
    sizes.push_back({{"batch_size", c.batch_size}, {"tail", c.tail}, {"batches", c.batches},
                     {"dropped_with_drop_last", c.dropped_with_drop_last}});
  }
  r["suggestions"] = {{"batch_sizes", sizes},
                      {"divisors", nearest_divisors(sug.divisors, spec.batch_size, 3)}};
  nlohmann::ordered_json notes = nlohmann::ordered_json::array();
  if (spec.shuffle && !cfg_.loader.seed_given && !spec.uses_distributed_sampler()) {
    notes.push_back("shuffle without a seed: PyTorch draws a random seed each run, so the order is not reproducible; "
                    "batchcheck used seed 0. Pass generator=torch.Generator().manual_seed(S) and set loader.seed to S.");
  }
  if (!start_.device_note.empty()) notes.push_back(start_.device_note);
  if (cfg_.precision.dtype != Precision::Fp32) {
    const std::string dtype = dtype_name(cfg_.precision.dtype);
    const std::string device = start_.device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
    std::string n = "precision: " + dtype + (cfg_.precision.recorded
                                                   ? ", as the casts of your step's torch.autocast run it (recorded in its capture)"
                                                   : " under torch.autocast(\"" + device + "\", dtype=torch." + dtype +
                                                         ") around forward and the loss, with PyTorch's own op lists");
    if (!cfg_.precision.from.empty()) n += ", from " + cfg_.precision.from;
    if (cfg_.model.format == ModelFormat::Eager && cfg_.loss.type == LossType::Step) {
      // batchcheck.scan()'s step as written: its own dispatch mode watches every op's output there.
      n += "; your step ran under it in your process, every op's " + dtype + " output watched there as it ran";
    } else if (cfg_.model.format == ModelFormat::Eager) {
      n += "; forward ran under it in your process, where its ops are not watched: an overflow there shows as the NaN "
           "it makes (output-nonfinite)";
    } else {
      n += "; every op's " + dtype + " output was watched for overflow";
    }
    if (cfg_.precision.dtype == Precision::Fp16 && cfg_.model.format != ModelFormat::Eager) {
      n += " and against " + std::to_string(static_cast<int>(std::floor(cfg_.checks.half_headroom * 100 + 1e-9))) + "% of 65,504 (half-headroom)";
    }
    notes.push_back(n);
  }
  for (const auto& n : extra_notes_) notes.push_back(n);
  if (cfg_.loss.type == LossType::Step && cfg_.model.format == ModelFormat::Eager) {
    notes.push_back("loss.type \"step\", run as written: your training step ran in the Python process on a private copy "
                    "of each batch as the loader yields it (its no_grad regions and in-place work as in training); the "
                    "arguments of its loss and index ops, its loss's backward, its gradients and where a NaN was born "
                    "were found there");
  } else if (cfg_.loss.type == LossType::Step) {
    notes.push_back("loss.type \"step\": your training step ran in the engine as TorchScript, traced with the model "
                    "(batchcheck.scan(step=...)); every loss op inside was checked where it runs, and Python control flow "
                    "in the step took the path of the batch each capture was traced on");
  }
  if (cfg_.model.format == ModelFormat::Eager && cfg_.loss.type != LossType::Step) {
    notes.push_back("model.format \"eager\": the model ran forward in the Python process; its outputs, the loss and the "
                    "batches were checked here, not its gradients, its weights or where a bad value was born");
  }
  if (end.device_lost) {
    notes.push_back("a CUDA device-side assert stopped the scan: the report covers the batches up to it");
  } else if (end.stopped_at_error) {
    notes.push_back("--fail-fast: the scan stopped at its first error, after " + plural(done_.load(), "batch", "batches") +
                    " (the probes and every rank's first and last batch come first); the rest was not checked");
  } else if (!result.complete) {
    notes.push_back("the scan was interrupted: the report covers only the batches checked");
  }
  if (settings_.edges) notes.push_back("--edges: only the first and last batch of each rank and the probes were checked");
  if (cfg_.checks.max_batches && !settings_.edges && cfg_.checks.max_batches < g.batches_per_rank) {
    notes.push_back("max_batches: only the first " + std::to_string(cfg_.checks.max_batches) + " batches of each rank were checked");
  }
  if (!cfg_.loader.ignored_keys.empty()) {
    notes.push_back("loader." + join(cfg_.loader.ignored_keys, ", loader.") +
                    ": accepted; they change how fast batches arrive, not which samples they hold, so the replay is the same");
  }
  r["notes"] = notes;
  if (settings_.shard) {
    result.partial = make_partial(cfg_, *settings_.shard, start_line_, step_log_, extra_notes_, end);
    result.partial["config"]["edges"] = settings_.edges;
    result.partial["config"]["max_batches"] = cfg_.checks.max_batches;
  }
  SeverityCounts c = count_severities(findings_);
  r["summary"] = {{"errors", c.errors}, {"warnings", c.warnings}, {"infos", c.infos}};
  return result;
}

}  // namespace batchcheck
