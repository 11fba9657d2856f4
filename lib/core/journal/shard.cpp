#include "core/journal/shard.h"

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

#include "core/base/errors.h"
#include "core/base/json_input.h"
#include "core/base/text.h"
#include "core/journal/aggregate.h"
#include "core/journal/clean_rows.h"
#include "core/journal/journal.h"
#include "core/journal/shard_check.h"

namespace batchcheck {

namespace {

using json = nlohmann::ordered_json;

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
  j["identity"] = scan_identity(cfg.text, {cfg.model.path}, data);
  j["config"] = {{"file", cfg.file},
                 {"dir", std::filesystem::path(cfg.file).parent_path().string()},
                 {"text", cfg.text},
                 {"mode", to_string(cfg.model.mode)},
                 {"precision", to_string(cfg.precision.dtype)},
                 {"half_headroom", cfg.checks.half_headroom}};
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

}  // namespace batchcheck
