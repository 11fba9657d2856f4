// What merge checks in a part before believing it (core/journal/shard_check.h): its own file because the
// plan, recomputed as core/scan/replay.cpp makes it, and the claims checked against it are most of
// the merge's code and none of its joining.
#include "core/journal/shard_check.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "core/base/errors.h"
#include "core/base/text.h"

namespace batchcheck {

namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void edited(const std::string& file, const std::string& where, const std::string& what) {
  throw InputError(file, where, what + ": the part was edited");
}

// A value as the part has it, for a message (cut short: it may be anything).
std::string shown(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string num(uint64_t n) {
  return std::to_string(n);
}

const json& member(const json& j, const char* key, const std::string& file, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) edited(file, where, "missing");
  return j.at(key);
}

std::optional<uint64_t> optional_count(const json& j, const std::string& file, const std::string& where) {
  if (j.is_null()) return std::nullopt;
  return part_count(j, file, where);
}

const json& list(const json& j, const std::string& file, const std::string& where) {
  if (!j.is_array()) edited(file, where, shown(j) + " is not a list");
  return j;
}

std::string at_index(const std::string& where, std::size_t i) {
  return where + "[" + num(i) + "]";
}

// What the plan has at a step, for a message.
std::string described(const StepInfo& p) {
  if (p.probe) return "the probe of " + plural(p.size, "sample");
  return "batch " + num(*p.batch) + " of rank " + num(*p.rank);
}

// ", but <the plan's batch> holds N": what a claimed size is wrong against.
std::string but_holds(const StepInfo& p) {
  if (p.probe) return ", but step " + num(p.step) + " is " + described(p);
  return ", but " + described(p) + " holds " + num(p.size);
}

std::string size_mismatch(uint64_t size, const StepInfo& p) {
  return "a batch of " + num(size) + but_holds(p);
}

// The first field of a step as claimed that is not the plan's: (field, what is wrong).
std::optional<std::pair<std::string, std::string>> mismatch(const StepInfo& c, const StepInfo& p) {
  const std::string is = ", but step " + num(p.step) + " is " + described(p);
  auto said = [](const std::optional<uint64_t>& v, const char* what) {
    return v ? std::string(what) + " " + num(*v) : std::string("no ") + what;
  };
  if (c.probe != p.probe)
    return std::make_pair(std::string("probe"), std::string(c.probe ? "a probe" : "not a probe") + is);
  if (c.rank != p.rank) return std::make_pair(std::string("rank"), said(c.rank, "rank") + is);
  if (c.batch != p.batch) return std::make_pair(std::string("batch"), said(c.batch, "batch") + is);
  if (c.size != p.size) return std::make_pair(std::string("size"), size_mismatch(c.size, p));
  return std::nullopt;
}

}  // namespace

uint64_t part_count(const json& j, const std::string& file, const std::string& where) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  edited(file, where, shown(j) + " is not a count (a non-negative integer)");
}

PartConfig part_config(const json& c, const std::string& file) {
  PartConfig p;
  auto text = [&](const char* key) {
    const std::string where = std::string("config.") + key;
    const json& v = member(c, key, file, where);
    if (!v.is_string()) edited(file, where, shown(v) + " is not a string");
    return v.get<std::string>();
  };
  p.file = text("file");
  p.dir = text("dir");
  p.text = text("text");
  const std::string mode = text("mode");
  if (mode != "train" && mode != "eval") edited(file, "config.mode", "\"" + mode + "\" is neither train nor eval");
  p.mode = mode == "eval" ? Mode::Eval : Mode::Train;
  if (c.contains("precision")) {
    const std::string precision = text("precision");
    const std::optional<Precision> d = parse_precision(precision);
    if (!d) edited(file, "config.precision", "\"" + precision + "\" is none of fp32, fp16, bf16");
    p.precision = *d;
  }
  if (c.contains("half_headroom")) {
    const json& h = c.at("half_headroom");
    if (!h.is_number() || !(h.get<double>() > 0 && h.get<double>() <= 1)) edited(file, "config.half_headroom", shown(h) + " is not a share in (0, 1]");
    p.half_headroom = h.get<double>();
  }
  // Optional, as merge has always read them: a scan without --edges, with every batch.
  if (c.contains("edges")) {
    if (!c.at("edges").is_boolean()) edited(file, "config.edges", shown(c.at("edges")) + " is not true or false");
    p.edges = c.at("edges").get<bool>();
  }
  if (c.contains("max_batches")) p.max_batches = part_count(c.at("max_batches"), file, "config.max_batches");
  return p;
}

void check_same_config(const PartConfig& part, const std::string& file, const PartConfig& reference,
                       const std::string& reference_file) {
  // The identity hashes the text, so parts of one scan hold the same text; their paths may differ.
  if (part.text != reference.text)
    edited(file, "config.text", "is not the config " + reference_file + " was scanned with");
  auto differs = [&](const char* key, const std::string& mine, const std::string& theirs) {
    edited(file, std::string("config.") + key, mine + ", but " + reference_file + " says " + theirs);
  };
  if (part.mode != reference.mode) differs("mode", to_string(part.mode), to_string(reference.mode));
  if (part.precision != reference.precision) differs("precision", to_string(part.precision), to_string(reference.precision));
  if (part.half_headroom != reference.half_headroom) differs("half_headroom", format_number(part.half_headroom), format_number(reference.half_headroom));
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  if (part.edges != reference.edges) differs("edges", flag(part.edges), flag(reference.edges));
  if (part.max_batches != reference.max_batches)
    differs("max_batches", num(part.max_batches), num(reference.max_batches));
}

PartPlan::PartPlan(const Config& cfg, bool edges, const json& start, const std::string& file)
    : world_size_(cfg.loader.world_size), edges_(edges), probes_(cfg.checks.probe_batch_sizes) {
  if (!start.is_object() || !start.contains("e") || start.at("e") != "start")
    edited(file, "start", "not the scan's start line");
  samples_ = part_count(member(member(start, "data", file, "start.data"), "samples", file, "start.data.samples"), file,
                        "start.data.samples");
  ranks_ = read_ranks(start, file);
  const uint64_t n = ranks_.size();
  const uint64_t claimed =
      part_count(member(start, "replay_steps", file, "start.replay_steps"), file, "start.replay_steps");

  try {
    g_ = compute_geometry(loader_spec(cfg.loader, samples_));
  } catch (const InputError& e) {
    // The order file read here may be what changed: not necessarily an edit of the part.
    throw InputError(file, "start.data.samples",
                     num(samples_) + " samples, which the config's loader.order does not fit: " + e.detail());
  }
  const uint64_t bpr = g_.batches_per_rank;
  // core/step_order's replay_batches, counted instead of listed.
  if (bpr == 0) {
    per_rank_ = 0;
  } else if (edges) {
    per_rank_ = std::min<uint64_t>(bpr, 2);
  } else {
    per_rank_ = cfg.checks.max_batches ? std::min(cfg.checks.max_batches, bpr) : bpr;
  }
  if (__builtin_mul_overflow(per_rank_, n, &replay_steps_)) {
    edited(file, "start.data.samples", num(samples_) + " samples make more steps than a scan can number");
  }
  if (claimed != replay_steps_) {
    edited(file, "start.replay_steps",
           num(claimed) + ", but start.data.samples " + num(samples_) + " make " + num(replay_steps_) +
               " with the part's config (" + plural(n, "rank") + " of " + plural(per_rank_, "batch", "batches") + ")");
  }

  const json& model = member(start, "model", file, "start.model");
  for (const char* key : {"frozen_train", "frozen_eval"}) {
    const std::string where = std::string("start.model.") + key;
    const json& ops = list(member(model, key, file, where), file, where);
    for (std::size_t i = 0; i < ops.size(); ++i) part_count(ops[i], file, at_index(where, i));
  }
  const json& geometry = list(member(start, "geometry", file, "start.geometry"), file, "start.geometry");
  for (std::size_t i = 0; i < geometry.size(); ++i) check_finding(geometry[i], file, at_index("start.geometry", i));
}

std::vector<uint64_t> PartPlan::read_ranks(const json& start, const std::string& file) const {
  // Before anything is sized by them: all of the config's world (a recorded order's ranks), in
  // order, or --rank's one.
  const std::string all =
      "the part's config has world_size " + num(world_size_) + " (ranks 0.." + num(world_size_ - 1) + ")";
  const json& ranks = list(member(start, "ranks", file, "start.ranks"), file, "start.ranks");
  const uint64_t n = ranks.size();
  if (n != 1 && n != world_size_) edited(file, "start.ranks", plural(n, "rank") + ", but " + all);
  std::vector<uint64_t> out;
  out.reserve(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string where = at_index("start.ranks", i);
    const uint64_t r = part_count(ranks[i], file, where);
    if (r >= world_size_) edited(file, where, "rank " + num(r) + ", but " + all);
    if (n > 1 && r != i)
      edited(file, where,
             "rank " + num(r) + " in place " + num(i) + ": the replay takes ranks 0.." + num(n - 1) + " in order");
    out.push_back(r);
  }
  return out;
}

void PartPlan::check_other(const json& start, const std::string& file, const std::string& reference_file) const {
  if (!start.is_object() || !start.contains("e") || start.at("e") != "start")
    edited(file, "start", "not the scan's start line");
  // The samples first: a part that says other samples than the first is the one to name, even
  // where its steps agree with its own samples.
  const uint64_t samples =
      part_count(member(member(start, "data", file, "start.data"), "samples", file, "start.data.samples"), file,
                 "start.data.samples");
  if (samples != samples_)
    edited(file, "start.data.samples", num(samples) + ", but " + reference_file + " says " + num(samples_));
  const std::vector<uint64_t> ranks = read_ranks(start, file);
  if (ranks != ranks_) {
    auto text = [](const std::vector<uint64_t>& r) {
      return r.size() == 1 ? "rank " + num(r.front()) : "ranks 0.." + num(r.size() - 1);
    };
    edited(file, "start.ranks", text(ranks) + ", but " + reference_file + " says " + text(ranks_));
  }
  const uint64_t steps =
      part_count(member(start, "replay_steps", file, "start.replay_steps"), file, "start.replay_steps");
  if (steps != replay_steps_)
    edited(file, "start.replay_steps", num(steps) + ", but " + reference_file + " says " + num(replay_steps_));
}

std::optional<StepInfo> PartPlan::planned(uint64_t step) const {
  if (step < replay_steps_) {
    const uint64_t rank = ranks_[step / per_rank_], pos = step % per_rank_;
    const uint64_t batch = edges_ && pos == 1 ? g_.batches_per_rank - 1 : pos;
    return StepInfo{step, rank, batch, false, batch_size(rank, batch)};
  }
  // The probes follow the replay's steps, one per size; run_probes skips the sizes it cannot take.
  const uint64_t i = step - replay_steps_;
  if (i < probes_.size() && probes_[i] != 0 && probes_[i] <= samples_) {
    return StepInfo{step, std::nullopt, std::nullopt, true, probes_[i]};
  }
  return std::nullopt;
}

uint64_t PartPlan::batch_size(uint64_t rank, uint64_t batch) const {
  // A recorded order's batches differ between ranks; a sampler gives every rank the same sizes.
  if (g_.recorded()) return g_.spec.recorded->ranks.at(rank).at(batch).size();
  return g_.batch_size_at(batch);
}

std::string PartPlan::plan_text() const {
  std::string s = replay_steps_ ? "replay steps 0.." + num(replay_steps_ - 1) : "no replay steps";
  std::vector<uint64_t> probes;
  for (uint64_t i = 0; i < probes_.size() && i <= UINT64_MAX - replay_steps_; ++i) {
    if (planned(replay_steps_ + i)) probes.push_back(replay_steps_ + i);
  }
  if (probes.empty()) {
    s += ", no probes";
  } else {
    s += (probes.size() == 1 ? ", probe step " : ", probe steps ") + join_uints(probes);
  }
  return "(" + s + ")";
}

uint64_t PartPlan::check_entry(const json& entry, const std::string& file, const std::string& where) const {
  if (!entry.is_object() || !entry.contains("step") || !entry.contains("lines")) {
    edited(file, where, shown(entry) + " is not {\"step\": ..., \"lines\": [...]}");
  }
  const uint64_t step = part_count(entry.at("step"), file, where + ".step");
  if (!planned(step)) edited(file, where + ".step", "step " + num(step) + " is not in the scan's plan " + plan_text());
  check_lines(step, entry.at("lines"), file, where);
  return step;
}

void PartPlan::check_sample(const json& j, const std::string& file, const std::string& where) const {
  const uint64_t i = part_count(j, file, where);
  if (i >= samples_) edited(file, where, "sample " + num(i) + ", but the dataset holds " + plural(samples_, "sample"));
}

void PartPlan::check_samples(const json& j, const std::string& file, const std::string& where) const {
  const json& samples = list(j, file, where);
  for (std::size_t i = 0; i < samples.size(); ++i) check_sample(samples[i], file, at_index(where, i));
}

void PartPlan::check_finding(const json& f, const std::string& file, const std::string& where) const {
  if (!f.is_object()) edited(file, where, shown(f) + " is not a finding");
  const uint64_t bpr = g_.batches_per_rank;
  auto rank = [&](const json& j, const std::string& w) {
    const auto r = optional_count(j, file, w);
    if (r && *r >= world_size_)
      edited(file, w, "rank " + num(*r) + ", but the part's config has world_size " + num(world_size_));
  };
  auto batch = [&](const json& j, const std::string& w) {
    const auto b = optional_count(j, file, w);
    if (b && *b >= bpr)
      edited(file, w,
             "batch " + num(*b) + ", but the part's config gives each rank " + plural(bpr, "batch", "batches"));
  };
  // Fields the journal's reader finds missing are its to refuse.
  auto each = [&](const char* key, const std::function<void(const json&, const std::string&)>& check) {
    if (!f.contains(key)) return;
    const std::string w = where + "." + key;
    const json& items = list(f.at(key), file, w);
    for (std::size_t i = 0; i < items.size(); ++i) check(items[i], at_index(w, i));
  };
  auto count = [&](const json& j, const std::string& w) { part_count(j, file, w); };
  if (f.contains("severity") && part_count(f.at("severity"), file, where + ".severity") > 2) {
    edited(file, where + ".severity", shown(f.at("severity")) + " is not a severity (0, 1 or 2)");
  }
  if (f.contains("rank")) rank(f.at("rank"), where + ".rank");
  each("ranks", rank);
  if (f.contains("batch")) batch(f.at("batch"), where + ".batch");
  each("batches", batch);
  if (f.contains("samples")) check_samples(f.at("samples"), file, where + ".samples");
  for (const char* key : {"count", "probe_size", "occurrences_total"}) {
    if (f.contains(key)) part_count(f.at(key), file, where + "." + key);
  }
  each("occurrences", [&](const json& o, const std::string& w) {
    if (!o.is_object()) edited(file, w, shown(o) + " is not an occurrence");
    if (o.contains("rank")) rank(o.at("rank"), w + ".rank");
    if (o.contains("batch")) batch(o.at("batch"), w + ".batch");
    if (o.contains("samples")) check_samples(o.at("samples"), file, w + ".samples");
    if (o.contains("count")) part_count(o.at("count"), file, w + ".count");
  });
  each("fixes", [&](const json& x, const std::string& w) {
    if (x.is_object() && x.contains("batch_sizes")) {
      const json& sizes = list(x.at("batch_sizes"), file, w + ".batch_sizes");
      for (std::size_t i = 0; i < sizes.size(); ++i) count(sizes[i], at_index(w + ".batch_sizes", i));
    }
  });
}

void PartPlan::check_at(const json& at, uint64_t step, const std::string& file, const std::string& where) const {
  if (!at.is_object()) edited(file, where, shown(at) + " is not a step");
  StepInfo c;
  c.step = part_count(member(at, "step", file, where + ".step"), file, where + ".step");
  if (c.step != step) edited(file, where + ".step", "step " + num(c.step) + " in the lines of step " + num(step));
  c.rank = optional_count(member(at, "rank", file, where + ".rank"), file, where + ".rank");
  c.batch = optional_count(member(at, "batch", file, where + ".batch"), file, where + ".batch");
  const json& probe = member(at, "probe", file, where + ".probe");
  if (!probe.is_boolean()) edited(file, where + ".probe", shown(probe) + " is not true or false");
  c.probe = probe.get<bool>();
  c.size = part_count(member(at, "size", file, where + ".size"), file, where + ".size");
  const std::optional<StepInfo> p = planned(step);
  if (!p) edited(file, where + ".step", "step " + num(step) + " is not in the scan's plan " + plan_text());
  if (auto m = mismatch(c, *p)) edited(file, where + "." + m->first, m->second);
}

void PartPlan::check_lines(uint64_t step, const json& lines, const std::string& file, const std::string& where) const {
  const std::string lw = where + ".lines";
  list(lines, file, lw);
  const std::optional<StepInfo> plan = planned(step);  // check_entry's step: in the plan
  // As Aggregator::ended and ::cause write them: the step's begin, its records, its end once
  // (each end counts a batch), then the causes localized after it.
  std::optional<std::size_t> ended;
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const json& line = lines[k];
    const std::string at = at_index(lw, k);
    if (!line.is_object() || !line.contains("e") || !line.at("e").is_string())
      edited(file, at, shown(line) + " is not a journal line");
    const std::string e = line.at("e").get<std::string>();
    if (e != "begin" && e != "record" && e != "end" && e != "cause")
      edited(file, at, "a \"" + e + "\" line, which no step's journal holds");
    if (ended && e != "cause") {
      edited(file, at,
             std::string(e == "end" ? "an " : "a ") + e + " after step " + num(step) + " ended (lines[" + num(*ended) +
                 "])");
    }
    if (!ended && e == "cause") edited(file, at, "a cause before step " + num(step) + " ended");
    if (e == "begin" && k != 0) edited(file, at, "a begin after the step's first line");
    if (e == "end") {
      const uint64_t s = part_count(member(line, "step", file, at + ".step"), file, at + ".step");
      if (s != step) edited(file, at + ".step", "step " + num(s) + " in the lines of step " + num(step));
      const uint64_t size = part_count(member(line, "size", file, at + ".size"), file, at + ".size");
      if (size != plan->size) edited(file, at + ".size", size_mismatch(size, *plan));
      const json& shapes = member(line, "shapes", file, at + ".shapes");
      if (!shapes.is_null()) {
        const uint64_t index =
            part_count(member(shapes, "index", file, at + ".shapes.index"), file, at + ".shapes.index");
        if (index != plan->batch.value_or(0)) {
          edited(file, at + ".shapes.index",
                 "batch " + num(index) + ", but step " + num(step) + " is " + described(*plan));
        }
        const uint64_t n = part_count(member(shapes, "size", file, at + ".shapes.size"), file, at + ".shapes.size");
        if (n != plan->size) edited(file, at + ".shapes.size", size_mismatch(n, *plan));
      }
      const json& stats = member(line, "stats", file, at + ".stats");
      if (!stats.is_null())
        part_count(member(stats, "nonfinite", file, at + ".stats.nonfinite"), file, at + ".stats.nonfinite");
      ended = k;
      continue;
    }
    check_at(member(line, "at", file, at + ".at"), step, file, at + ".at");
    if (e == "begin") {
      // Empty in this version's parts; the first wrote the batch's indices, as a list or a run
      // (read into memory by its count: at most the batch's size).
      const json& idx = member(line, "indices", file, at + ".indices");
      if (idx.is_object()) {
        const uint64_t first =
            part_count(member(idx, "first", file, at + ".indices.first"), file, at + ".indices.first");
        const uint64_t n = part_count(member(idx, "count", file, at + ".indices.count"), file, at + ".indices.count");
        if (n != plan->size) edited(file, at + ".indices.count", plural(n, "index", "indices") + but_holds(*plan));
        if (first > samples_ || samples_ - first < n) {
          edited(file, at + ".indices.first",
                 "samples " + num(first) + " on, but the dataset holds " + plural(samples_, "sample"));
        }
      } else {
        check_samples(idx, file, at + ".indices");
        if (!idx.empty() && idx.size() != plan->size) {
          edited(file, at + ".indices", plural(idx.size(), "index", "indices") + but_holds(*plan));
        }
      }
    } else if (e == "record") {
      part_count(member(line, "count", file, at + ".count"), file, at + ".count");
      check_samples(member(line, "samples", file, at + ".samples"), file, at + ".samples");
      check_samples(member(line, "batch_indices", file, at + ".batch_indices"), file, at + ".batch_indices");
    }
  }
  if (!ended) edited(file, lw, "step " + num(step) + " never ends");
}

void PartPlan::check_row(const CleanStep& row, std::size_t number, const std::string& file) const {
  const std::string at = "row " + num(number) + ": ";
  const std::optional<StepInfo> p = planned(row.at.step);
  if (!p) edited(file, "clean", at + "step " + num(row.at.step) + " is not in the scan's plan " + plan_text());
  if (auto m = mismatch(row.at, *p)) edited(file, "clean", at + m->second);
}

}  // namespace batchcheck
