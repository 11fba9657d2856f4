#include "core/journal/merge.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <fstream>
#include <map>
#include <set>
#include <system_error>
#include <thread>

#include "core/base/errors.h"
#include "core/base/json_input.h"
#include "core/base/text.h"
#include "core/journal/aggregate.h"
#include "core/journal/clean_rows.h"
#include "core/journal/journal.h"
#include "core/journal/shard.h"
#include "core/journal/shard_check.h"

namespace batchcheck {

namespace {

using json = nlohmann::ordered_json;

const json& part_field(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) throw InputError(path, key, "missing: not a partial report of batchcheck scan --shard");
  return j.at(key);
}

struct Part {
  std::string path;
  json j;
  uint64_t index = 0, count = 0;
  std::vector<CleanStep> clean;  // decoded rows
};

Part load_part(const std::string& path) {
  Part p{path, json(), 0, 0, {}};
  std::string text = read_text_file(path, path);
  const std::optional<std::string> rows = take_clean_rows(text);
  // Keeping the key order: the merged report prints as the whole scan's did.
  p.j = parse_ordered_json_text(path, text);
  const json version = p.j.is_object() ? p.j.value("batchcheck_partial", json()) : json();
  if (version != 1 && version != kPartialVersion) {
    throw InputError(path, "", "not a partial report of batchcheck scan --shard (a full report needs no merge)");
  }
  const json& shard = part_field(p.j, "shard", path);
  if (!shard.is_object() || !shard.contains("index") || !shard.contains("count")) {
    throw InputError(path, "shard", "malformed: not a partial report of batchcheck scan --shard");
  }
  p.index = part_count(shard.at("index"), path, "shard.index");
  p.count = part_count(shard.at("count"), path, "shard.count");
  if (!p.j.contains("clean")) return p;  // version 1
  try {
    const json& clean = p.j.at("clean");
    if (clean.at("columns") != kCleanColumns) {
      throw InputError(path, "clean", "columns " + clean.at("columns").dump() + " are not this batchcheck's: merge with the version that scanned");
    }
    p.clean = rows ? decode_clean_rows(*rows, path, true) : decode_clean_rows(clean.at("rows").get<std::string>(), path);
  } catch (const json::exception&) {
    throw InputError(path, "clean", "malformed: expected {\"columns\": ..., \"rows\": \"...\"}: the part was edited");
  }
  return p;
}

// Parts are read on every core (reading is most of a large merge); the first bad part in the
// order given is the one reported, whichever thread met it first.
std::vector<Part> load_parts(const std::vector<std::string>& paths) {
  std::vector<Part> parts(paths.size());
  std::vector<std::exception_ptr> errors(paths.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < paths.size();) {
      try {
        parts[i] = load_part(paths[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(paths.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  try {
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads (ulimit -u): the ones started and this one read the rest.
  }
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return parts;
}

}  // namespace

ScanResult merge_parts(const MergeInput& in, std::ostream& log) {
  if (in.parts.empty()) throw InputError("", "merge", "no partial reports given (batchcheck merge PART... -o REPORT.json)");
  std::vector<Part> parts = load_parts(in.parts);
  try {
    const uint64_t count = parts.front().count;
    const json& identity = part_field(parts.front().j, "identity", parts.front().path);
    std::map<uint64_t, Part*> by_index;
    for (Part& p : parts) {
      const uint64_t n = p.count;
      if (n != count) {
        throw InputError(p.path, "shard", "is one of " + std::to_string(n) + " shards, but " + parts.front().path + " is one of " +
                                              std::to_string(count));
      }
      for (const char* what : {"config", "model", "data"}) {
        if (part_field(p.j, "identity", p.path).at(what) != identity.at(what)) {
          throw InputError(p.path, "identity", std::string("was scanned with another ") + what + " than " + parts.front().path);
        }
      }
      if (p.index >= count) throw InputError(p.path, "shard", "shard " + std::to_string(p.index) + " of " + std::to_string(count) + " does not exist");
      auto [it, fresh] = by_index.emplace(p.index, &p);
      if (!fresh) {
        throw InputError(p.path, "shard", "shard " + std::to_string(p.index) + "/" + std::to_string(count) + " is also " +
                                              it->second->path + ": each shard once");
      }
    }
    // Every index given is below the count: the missing ones are the gaps, of which the first
    // few are named (a count is a claim too, and could be 2^64-1).
    if (by_index.size() < count) {
      constexpr std::size_t kNamed = 10;
      std::vector<std::string> missing;
      for (uint64_t k = 0; k < count && missing.size() < kNamed; ++k) {
        if (!by_index.count(k)) missing.push_back(std::to_string(k) + "/" + std::to_string(count));
      }
      const uint64_t total = count - by_index.size();
      throw InputError("", "merge", plural(total, "shard") + " missing: " + join(missing) +
                                        (total > missing.size() ? " and " + std::to_string(total - missing.size()) + " more" : "") +
                                        " (given " + plural(parts.size(), "part") + ")");
    }

    // The plan is recomputed from the first part's config and checked against every part's
    // claims (core/journal/shard_check.h) before anything is sized by them.
    const Part& first_part = *by_index.at(0);
    const json& first = first_part.j;
    const PartConfig c = part_config(part_field(first, "config", first_part.path), first_part.path);
    for (const auto& [k, p] : by_index) {
      check_same_config(part_config(part_field(p->j, "config", p->path), p->path), p->path, c, first_part.path);
    }
    Config cfg = [&] {
      try {
        return parse_config(c.file, c.text, c.dir);
      } catch (const InputError& e) {
        if (e.file() == c.file) throw;  // the config text itself
        // A file the part's config names (its loader.order), opened where the part says: what
        // it holds is never echoed back, the path having come from the part.
        throw InputError(first_part.path, "config.loader.order",
                         "the recorded order the part's config names (" + e.file() +
                             ") does not load as the scan's order: merge where the scan's files are");
      }
    }();
    if (in.files_read && !cfg.loader.order_path.empty()) in.files_read->push_back(cfg.loader.order_path);
    cfg.model.mode = c.mode;
    cfg.checks.max_batches = c.max_batches;
    if (c.precision != cfg.precision.dtype) {  // --precision, as the parts ran
      cfg.precision.dtype = c.precision;
      cfg.precision.recorded = false;
      cfg.precision.from = "--precision";
    }
    cfg.checks.half_headroom = c.half_headroom;
    const PartPlan plan(cfg, c.edges, part_field(first, "start", first_part.path), first_part.path);
    for (const auto& [k, p] : by_index) {
      if (k != 0) plan.check_other(part_field(p->j, "start", p->path), p->path, first_part.path);
    }
    ScanSettings settings;
    settings.fail_on = in.fail_on;
    settings.edges = c.edges;
    Aggregator agg(cfg, settings, log);
    const uint64_t replay_steps = plan.replay_steps();

    JoinedSteps steps;
    ScanEnd end;
    std::vector<std::string> notes;
    for (auto& [k, p] : by_index) {
      uint64_t covered = 0;
      auto take = [&, k = k, p = p](uint64_t step, const StepLines& lines) {
        const bool probe = step >= replay_steps;
        if ((probe && k != 0) || (!probe && step % count != k)) {
          throw InputError(p->path, "steps", "step " + std::to_string(step) + " is not shard " + std::to_string(k) + "'s");
        }
        if (!probe) ++covered;
        steps.emplace_back(step, lines);
      };
      const json& part_steps = part_field(p->j, "steps", p->path);
      if (!part_steps.is_array()) throw InputError(p->path, "steps", "expected a list of steps: the part was edited");
      for (std::size_t i = 0; i < part_steps.size(); ++i) {
        const json& s = part_steps[i];
        take(plan.check_entry(s, p->path, "steps[" + std::to_string(i) + "]"), StepLines{&s.at("lines"), &p->path, nullptr});
      }
      for (std::size_t i = 0; i < p->clean.size(); ++i) {
        const CleanStep& r = p->clean[i];
        plan.check_row(r, i + 1, p->path);
        take(r.at.step, StepLines{nullptr, &p->path, &r});
      }
      const uint64_t expected = replay_steps > k ? (replay_steps - k - 1) / count + 1 : 0;  // no overflow near 2^64
      const bool complete = p->j.at("complete").get<bool>();
      if (complete && covered != expected) {
        throw InputError(p->path, "steps", "covers " + std::to_string(covered) + " of its " + std::to_string(expected) +
                                               " batches but says it is complete");
      }
      end.complete = end.complete && complete;
      end.device_lost = end.device_lost || p->j.at("device_lost").get<bool>();
      end.stopped_at_error = end.stopped_at_error || p->j.value("stopped_at_error", false);
      for (const auto& n : p->j.at("notes")) {
        const std::string text = n.get<std::string>();
        if (std::find(notes.begin(), notes.end(), text) == notes.end()) notes.push_back(text);
      }
    }
    std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = 1; i < steps.size(); ++i) {
      if (steps[i].first == steps[i - 1].first) {
        throw InputError(*steps[i].second.from, "steps", "step " + std::to_string(steps[i].first) + " is given twice: the part was edited");
      }
    }
    return join_steps(agg, first.at("start"), by_index.at(0)->path, steps, notes, end);
  } catch (const json::exception& e) {
    throw InputError("", "merge", std::string("a part is malformed: ") + single_line(e.what()));
  }
}

}  // namespace batchcheck
