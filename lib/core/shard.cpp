#include "core/shard.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/aggregate.h"
#include "core/clean_rows.h"
#include "core/errors.h"
#include "core/journal.h"
#include "core/json_input.h"
#include "core/shard_check.h"
#include "core/text.h"

namespace batchcheck {

namespace {

using json = nlohmann::ordered_json;

// 2: clean steps as rows ("clean"); 1 (every step as journal lines) is still read.
constexpr int kPartialVersion = 2;

std::optional<uint64_t> number(const char* text) {
  if (!text || !*text) return std::nullopt;
  const std::string s(text);
  if (s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoull(s);
}

[[noreturn]] void bad_shard(const std::string& what) { throw InputError("", "--shard", what); }

uint64_t env_number(const EnvFn& env, const char* name) {
  const char* v = env(name);
  auto n = number(v);
  if (!n) bad_shard(std::string(name) + "=\"" + (v ? v : "") + "\" is not a number");
  return *n;
}

// The index a launcher gives this process, with its count when the launcher knows it.
std::optional<Shard> from_env(const EnvFn& env) {
  if (env("RANK") && env("WORLD_SIZE")) {
    return Shard{env_number(env, "RANK"), env_number(env, "WORLD_SIZE"), "torchrun (RANK, WORLD_SIZE)", 0};
  }
  if (env("SLURM_ARRAY_TASK_ID")) {
    // Task ids can start anywhere and be stepped (--array=10-40:10): the shard is the
    // id's place in the array, never the id itself.
    const uint64_t id = env_number(env, "SLURM_ARRAY_TASK_ID");
    const uint64_t min = env("SLURM_ARRAY_TASK_MIN") ? env_number(env, "SLURM_ARRAY_TASK_MIN") : 0;
    const uint64_t step = env("SLURM_ARRAY_TASK_STEP") ? env_number(env, "SLURM_ARRAY_TASK_STEP") : 1;
    Shard s{0, 0, "SLURM array (SLURM_ARRAY_TASK_ID)"};
    if (step == 0 || id < min || (id - min) % step != 0) {
      bad_shard("SLURM_ARRAY_TASK_ID=" + std::to_string(id) + " is not in the array " + std::to_string(min) + "-:" +
                std::to_string(step) + " (an array of listed ids such as --array=1,5,9 has no step: use --array=0-N)");
    }
    s.index = (id - min) / step;
    if (env("SLURM_ARRAY_TASK_COUNT")) s.count = env_number(env, "SLURM_ARRAY_TASK_COUNT");
    return s;
  }
  if (env("JOB_COMPLETION_INDEX")) return Shard{env_number(env, "JOB_COMPLETION_INDEX"), 0, "Indexed Job (JOB_COMPLETION_INDEX)", 0};
  return std::nullopt;
}

// FNV-1a, 64 bits: stable across machines and builds, enough to tell two setups apart.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(p[i]);
      h *= 1099511628211ull;
    }
  }
  void add(const std::string& s) { add(s.data(), s.size()); }
  std::string hex() const {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
    return b;
  }
};

// A file's size, and its bytes (all of them up to `whole`, else the first and last MiB).
std::string file_hash(const std::string& path, uint64_t whole) {
  namespace fs = std::filesystem;
  std::error_code ec;
  Fnv f;
  if (!fs::is_regular_file(path, ec)) {
    f.add(fs::is_directory(path, ec) ? "directory" : "missing");
    return f.hex();
  }
  const uint64_t size = fs::file_size(path, ec);
  f.add(std::to_string(size));
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  auto read_at = [&](uint64_t at, uint64_t n) {
    in.clear();
    in.seekg(static_cast<std::streamoff>(at));
    while (n > 0 && in) {
      in.read(buf.data(), static_cast<std::streamsize>(std::min<uint64_t>(n, buf.size())));
      const auto got = static_cast<uint64_t>(in.gcount());
      if (got == 0) break;
      f.add(buf.data(), got);
      n -= got;
    }
  };
  if (size <= whole) {
    read_at(0, size);
  } else {
    read_at(0, 1 << 20);
    read_at(size - (1 << 20), 1 << 20);
  }
  return f.hex();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const json& part_field(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) throw InputError(path, key, "missing: not a partial report of batchcheck scan --shard");
  return j.at(key);
}

}  // namespace

Shard resolve_shard(const std::string& value, const EnvFn& env) {
  Shard s;
  const auto slash = value.find('/');
  const std::string head = value.substr(0, slash);
  std::optional<uint64_t> count;
  if (slash != std::string::npos) {
    count = number(value.substr(slash + 1).c_str());
    if (!count || *count == 0) bad_shard("\"" + value + "\": expected K/N with 0 <= K < N, \"env\" or \"env/N\"");
  }
  if (head == "env") {
    auto e = from_env(env);
    if (!e) {
      bad_shard("\"env\" reads the launcher's variables, but none is set: RANK and WORLD_SIZE (torchrun), "
                "SLURM_ARRAY_TASK_ID (sbatch --array) or JOB_COMPLETION_INDEX (a Kubernetes Indexed Job, with env/N)");
    }
    s = *e;
    if (count && s.count && s.count != *count) {
      bad_shard("\"" + value + "\" says " + std::to_string(*count) + " shards, but " + s.source + " says " + std::to_string(s.count));
    }
    if (count) s.count = *count;
    if (s.count == 0) bad_shard(s.source + " gives no count: use --shard env/N with N the number of shards (the Job's completions)");
  } else {
    auto k = number(head.c_str());
    if (!k || !count) bad_shard("\"" + value + "\": expected K/N with 0 <= K < N, \"env\" or \"env/N\"");
    s = Shard{*k, *count, "--shard", 0};
  }
  if (s.index >= s.count) {
    bad_shard("shard " + std::to_string(s.index) + " of " + std::to_string(s.count) + " (from " + s.source +
              ") does not exist: shards are 0.." + std::to_string(s.count - 1));
  }
  return s;
}

std::string shard_output_path(const std::string& path, const Shard& shard) {
  const std::string mark = "{shard}";
  const auto at = path.find(mark);
  if (at == std::string::npos) {
    if (shard.source != "--shard") {
      throw InputError("", "-o", "every process " + shard.source + " starts writes its own part: put {shard} in the path (e.g. -o part-{shard}.json)");
    }
    return path;
  }
  return path.substr(0, at) + std::to_string(shard.index) + path.substr(at + mark.size());
}

json scan_identity(const std::string& config_text, const std::vector<std::string>& model_files,
                   const std::vector<std::string>& data_files) {
  Fnv config;
  config.add(config_text);
  Fnv model, data;
  for (const auto& f : model_files) model.add(file_hash(f, uint64_t{1} << 32));
  for (const auto& f : data_files) data.add(file_hash(f, 2 << 20));
  return {{"config", config.hex()}, {"model", model.hex()}, {"data", data.hex()}};
}

json make_partial(const Config& cfg, const Shard& shard, const json& start, const StepLog& log,
                  const std::vector<std::string>& notes, const ScanEnd& end) {
  std::vector<std::string> data;
  for (const auto& f : {cfg.data.path, cfg.data.inputs, cfg.data.targets}) {
    if (!f.empty()) data.push_back(f);
  }
  for (const auto& f : cfg.data.field_files) data.push_back(f);
  json j;
  j["batchcheck_partial"] = kPartialVersion;
  j["shard"] = {{"index", shard.index}, {"count", shard.count}, {"source", shard.source}};
  const std::string text = read_text(cfg.file);
  j["identity"] = scan_identity(text, {cfg.model.path}, data);
  j["config"] = {{"file", cfg.file},
                 {"dir", std::filesystem::path(cfg.file).parent_path().string()},
                 {"text", text},
                 {"mode", to_string(cfg.model.mode)}};
  j["complete"] = end.complete;
  j["device_lost"] = end.device_lost;
  j["stopped_at_error"] = end.stopped_at_error;
  j["notes"] = notes;
  j["start"] = start;
  json s = json::array();
  std::vector<const CleanStep*> rows;
  auto l = log.lines().begin();
  for (const auto& [step, c] : log.cleans()) {
    for (; l != log.lines().end() && l->first < step; ++l) s.push_back({{"step", l->first}, {"lines", l->second}});
    if (c.shapes) {
      s.push_back({{"step", step}, {"lines", clean_step_lines(c)}});
    } else {
      rows.push_back(&c);
    }
  }
  for (; l != log.lines().end(); ++l) s.push_back({{"step", l->first}, {"lines", l->second}});
  j["steps"] = s;
  j["clean"] = {{"columns", kCleanColumns}, {"rows", encode_clean_rows(rows)}};
  return j;
}

ScanResult join_steps(Aggregator& agg, const json& start, const std::string& start_from,
                      const JoinedSteps& steps, const std::vector<std::string>& notes, const ScanEnd& end) {
  auto apply = [&](const json& line, const std::string& from) {
    if (apply_journal_json(line, agg).kind == JournalLine::Kind::Malformed) {
      throw InputError(from, "steps", "a malformed journal line: the part was edited or truncated");
    }
  };
  apply(start, start_from);
  // In step order, as one process would have told them.
  for (const auto& [step, lines] : steps) {
    if (lines.clean) {
      agg.clean_step(lines.clean->at, lines.clean->end());
      continue;
    }
    for (const json& line : *lines.lines) apply(line, *lines.from);
  }
  for (const auto& n : notes) agg.note(n);
  agg.finish(end);
  return agg.result(end);
}

namespace {

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
    // claims (core/shard_check.h) before anything is sized by them.
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
