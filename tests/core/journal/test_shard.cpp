// Shards: which part of the scan a process takes, from --shard or its launcher's variables.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "core/base/errors.h"
#include "core/findings/findings.h"
#include "core/journal/aggregate.h"
#include "core/journal/clean_rows.h"
#include "core/journal/merge.h"
#include "core/journal/shard.h"
#include "core/plan/geometry.h"
#include "core/plan/step_order.h"

using namespace batchcheck;

namespace {

EnvFn env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::string& value, std::map<std::string, std::string> vars = {}) {
  try {
    resolve_shard(value, env_of(vars));
  } catch (const InputError& e) {
    return e.where() + ": " + e.detail();
  }
  return "";
}

}  // namespace

TEST(Shard, ExplicitAndFromEachLauncher) {
  Shard s = resolve_shard("2/5", env_of({}));
  EXPECT_EQ(s.index, 2u);
  EXPECT_EQ(s.count, 5u);
  EXPECT_TRUE(s.has_step(7));
  EXPECT_FALSE(s.has_step(8));

  s = resolve_shard("env", env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}));
  EXPECT_EQ(s.index, 1u);
  EXPECT_EQ(s.count, 2u);
  EXPECT_EQ(s.source, "torchrun (RANK, WORLD_SIZE)");

  // sbatch --array=10-40:10: task 30 is the third of four.
  s = resolve_shard("env", env_of({{"SLURM_ARRAY_TASK_ID", "30"}, {"SLURM_ARRAY_TASK_MIN", "10"},
                                   {"SLURM_ARRAY_TASK_STEP", "10"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}));
  EXPECT_EQ(s.index, 2u);
  EXPECT_EQ(s.count, 4u);

  // A Kubernetes Indexed Job: the index, with the count given.
  s = resolve_shard("env/3", env_of({{"JOB_COMPLETION_INDEX", "2"}}));
  EXPECT_EQ(s.index, 2u);
  EXPECT_EQ(s.count, 3u);
}

TEST(Shard, RefusesWhatCannotBeAShard) {
  EXPECT_EQ(error_of("3/3"), "--shard: shard 3 of 3 (from --shard) does not exist: shards are 0..2");
  EXPECT_EQ(error_of("1/0"), "--shard: \"1/0\": expected K/N with 0 <= K < N, \"env\" or \"env/N\"");
  EXPECT_EQ(error_of("a"), "--shard: \"a\": expected K/N with 0 <= K < N, \"env\" or \"env/N\"");
  EXPECT_NE(error_of("env").find("none is set: RANK and WORLD_SIZE (torchrun)"), std::string::npos);
  EXPECT_EQ(error_of("env", {{"JOB_COMPLETION_INDEX", "1"}}),
            "--shard: Indexed Job (JOB_COMPLETION_INDEX) gives no count: use --shard env/N with N the number of shards "
            "(the Job's completions)");
  EXPECT_EQ(error_of("env/3", {{"RANK", "0"}, {"WORLD_SIZE", "2"}}),
            "--shard: \"env/3\" says 3 shards, but torchrun (RANK, WORLD_SIZE) says 2");
  EXPECT_NE(error_of("env", {{"SLURM_ARRAY_TASK_ID", "15"}, {"SLURM_ARRAY_TASK_MIN", "10"}, {"SLURM_ARRAY_TASK_STEP", "10"},
                             {"SLURM_ARRAY_TASK_COUNT", "4"}})
                .find("SLURM_ARRAY_TASK_ID=15 is not in the array"),
            std::string::npos);
  EXPECT_EQ(error_of("env", {{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "--shard: RANK=\"x\" is not a number");
}

TEST(Shard, OutputPathPerShard) {
  EXPECT_EQ(shard_output_path("parts/part-{shard}.json", Shard{3, 4, "--shard", 0}), "parts/part-3.json");
  EXPECT_EQ(shard_output_path("part.json", Shard{3, 4, "--shard", 0}), "part.json");
  // Under a launcher every process gets the same arguments: one path would be overwritten.
  try {
    shard_output_path("part.json", Shard{1, 2, "torchrun (RANK, WORLD_SIZE)", 0});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.detail(), "every process torchrun (RANK, WORLD_SIZE) starts writes its own part: put {shard} in "
                                     "the path (e.g. -o part-{shard}.json)");
  }
}

// A part's clean steps stay compact: the batch shapes only on its lowest and highest step (the
// report's first and last batch), whatever order they end in; a step that gets a line later
// becomes journal lines; every step comes back in order.
TEST(StepLog, KeepsShapesOnTheLowestAndHighestStepOnly) {
  StepLog log;
  auto end_of = [](uint64_t step) {
    StepEnd e;
    e.step = step;
    e.forward_ok = true;
    e.size = 4;
    e.shapes = BatchShapes{step, 4, {}, {}, {}};
    return e;
  };
  for (uint64_t s : {0, 9, 3, 5, 12, 1}) log.clean(StepInfo{s, 0, s, false, 4}, end_of(s));
  std::vector<uint64_t> shaped;
  for (const auto& [step, c] : log.cleans()) {
    if (c.shapes) shaped.push_back(step);
  }
  EXPECT_EQ(shaped, (std::vector<uint64_t>{0, 12}));
  EXPECT_EQ(log.cleans().at(12).end().shapes->index, 12u);
  EXPECT_FALSE(log.cleans().at(9).end().shapes);

  log.lines(5).push_back({{"e", "cause"}});  // a late line: step 5 becomes lines
  EXPECT_EQ(log.cleans().count(5), 0u);
  ASSERT_EQ(log.lines().at(5).size(), 3u);
  EXPECT_EQ(log.lines().at(5)[0]["e"], "begin");
  EXPECT_EQ(log.lines().at(5)[1]["e"], "end");
}

TEST(CleanRows, RoundTripExactly) {
  CleanStep a;
  a.at = StepInfo{7, 1, 3, false, 16};
  a.forward_ok = true;
  a.stats = BatchStats{-0.1, 1e-300, 0, 0.6931471805599453, false, 0.0, 1.0};
  CleanStep b;  // a probe: no rank or batch, no statistics
  b.at = StepInfo{90, std::nullopt, std::nullopt, true, 1};
  CleanStep c;  // statistics with nothing finite
  c.at = StepInfo{8, 0, 4, false, 3};
  c.stats = BatchStats{std::nullopt, std::nullopt, 12, std::nullopt, true, std::nullopt, std::nullopt};
  const std::string rows = encode_clean_rows({&a, &b, &c});
  EXPECT_EQ(rows,
            "7 1 3 0 16 1 -0.1 1e-300 0 0.6931471805599453 0 0 1\n"
            "90 - - 1 1 0 - - - - - - -\n"
            "8 0 4 0 3 0 - - 12 - 1 - -\n");
  const std::vector<CleanStep> back = decode_clean_rows(rows, "p.json");
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(encode_clean_rows({&back[0], &back[1], &back[2]}), rows);
  EXPECT_EQ(back[0].stats->loss, 0.6931471805599453);
  EXPECT_EQ(back[0].stats->pred_max, 1e-300);
  EXPECT_FALSE(back[1].at.rank);
  EXPECT_TRUE(back[1].at.probe);
  EXPECT_FALSE(back[1].stats);
  EXPECT_TRUE(back[2].stats->loss_nonfinite);
}

TEST(CleanRows, AnEditedRowIsNamed) {
  auto error_of = [](const std::string& rows) {
    try {
      decode_clean_rows(rows, "p.json");
    } catch (const InputError& e) {
      return e.file() + ": " + e.where() + ": " + e.detail();
    }
    return std::string();
  };
  const std::string good = "7 1 3 0 16 1 -0.1 0.9 0 0.69 0 0 1\n";
  EXPECT_EQ(error_of(good), "");
  EXPECT_EQ(error_of(good + "8 1 4 0 16 1 x 0.9 0 0.69 0 0 1\n"),
            "p.json: clean: row 2: \"x\" is not a number: the part was edited or truncated");
  EXPECT_EQ(error_of("7 1 3 0 16 1 -0.1 0.9 0 0.69\n"), "p.json: clean: row 1: fewer than 13 fields: the part was edited or truncated");
  EXPECT_EQ(error_of("7 1 3 0 16 1 -0.1 0.9 0 0.69 0 0 1 5\n"),
            "p.json: clean: row 1: more than 13 fields: the part was edited or truncated");
  EXPECT_EQ(error_of("7 1 3 2 16 1 -0.1 0.9 0 0.69 0 0 1\n"), "p.json: clean: row 1: a flag of 2: the part was edited or truncated");
  EXPECT_EQ(error_of("7 1 3 0 16 1 -0.1 0.9 - 0.69 0 0 1\n"),
            "p.json: clean: row 1: statistics in part: the part was edited or truncated");
  EXPECT_EQ(error_of("7 1 3 0 16 1 -0.1 0.9 0 0.69 0 0 1"), "p.json: clean: row 1: no end of line: the part was edited or truncated");
  EXPECT_EQ(error_of("- 1 3 0 16 1 -0.1 0.9 0 0.69 0 0 1\n"), "p.json: clean: row 1: a missing count: the part was edited or truncated");
  EXPECT_EQ(error_of("7  1 3 0 16 1 -0.1 0.9 0 0.69 0 0 1\n"), "p.json: clean: row 1: an empty field: the part was edited or truncated");
}

// merge believes nothing a part says about the scan's plan (issue 29, item 8): parts made as a
// sharded scan makes them, then edited, are refused naming the part and the field.
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

class PartsDir {
 public:
  explicit PartsDir(const std::string& tag)
      : path_(fs::temp_directory_path() / ("batchcheck_merge_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  PartsDir(PartsDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  PartsDir(const PartsDir&) = delete;
  PartsDir& operator=(const PartsDir&) = delete;
  ~PartsDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// 30 samples over 2 DDP ranks in batches of 4: 4 batches per rank (4, 4, 4, 3), 8 replay steps;
// a probe of 1 (step 8) and one of 64, more than the dataset, which never runs.
constexpr const char* kConfig = R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},
 "loader": {"batch_size": 4, "sampler": "distributed", "world_size": 2, "shuffle": false},
 "loss": {"type": "mse"}, "checks": {"probe_batch_sizes": [1, 64]}})";
constexpr uint64_t kSamples = 30;

// What a replay tells its Aggregator (core/scan/replay.cpp, without a model): the start with its
// geometry findings, each step of the shard in turn (the first rank's with their shapes, step 3
// with a finding, so that it keeps its journal lines), then shard 0's probes.
void replay_into(Aggregator& agg, const Config& cfg, const std::optional<Shard>& shard) {
  const LoaderSpec spec = loader_spec(cfg.loader, kSamples);
  const BatchPlan plan(compute_geometry(spec), {});
  const Geometry& g = plan.geometry();
  const std::vector<uint64_t> ranks = replay_ranks(spec.world_size, std::nullopt);
  const std::vector<uint64_t> batches = replay_batches(g.batches_per_rank, false, cfg.checks.max_batches);
  const uint64_t per_rank = batches.size(), total = per_rank * ranks.size();
  ScanStart s;
  s.data.samples = kSamples;
  s.ranks = ranks;
  s.replay_steps = total;
  s.device = "cpu";
  s.geometry = geometry_findings(plan, ranks, cfg.loss.type);
  agg.start(s);
  auto run = [&](const StepInfo& at, const std::vector<int64_t>& indices, bool shapes) {
    agg.begin(at, indices);
    if (at.step == 3) {
      RecordEvent r;
      r.at = at;
      r.id = "output-nonfinite";
      r.stage = "output";
      r.message = "predictions hold 2 NaNs";
      r.samples = {indices[1]};
      r.count = 1;
      r.batch_indices = indices;
      agg.record(std::move(r));
    }
    StepEnd e;
    e.step = at.step;
    e.forward_ok = true;
    e.size = at.size;
    if (shapes) e.shapes = BatchShapes{at.batch.value_or(0), at.size, {}, {}, {}};
    e.stats = BatchStats{-1.0, 1.0, 0, 0.5 + 0.01 * static_cast<double>(at.step), false, std::nullopt, std::nullopt};
    agg.end(e);
  };
  for (uint64_t step = 0; step < total; ++step) {
    if (shard && !shard->has_step(step)) continue;
    const uint64_t rank = ranks[step / per_rank], b = batches[step % per_rank];
    const std::vector<int64_t> idx = plan.batch_indices(rank, b);
    run(StepInfo{step, rank, b, false, idx.size()}, idx, rank == ranks.front());
  }
  if (!shard || shard->index == 0) {
    const auto& sizes = cfg.checks.probe_batch_sizes;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] > kSamples) continue;
      std::vector<int64_t> idx(sizes[i]);
      for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = static_cast<int64_t>(k);
      run(StepInfo{total + i, std::nullopt, std::nullopt, true, sizes[i]}, idx, false);
    }
  }
  agg.finish(ScanEnd{});
}

struct Scan {
  PartsDir dir;
  std::string config;
  std::vector<std::string> parts;  // part-K.json, shard K of their number
  std::string whole;               // the report of the scan done whole
};

// The parts of the scan in `count` shards, written as `scan --shard K/N -o part-K.json` writes them.
Scan sharded_scan(const std::string& tag, uint64_t count) {
  Scan s{PartsDir(tag), "", {}, ""};
  s.config = s.dir.file("cfg.json");
  std::ofstream(s.config) << kConfig;
  const Config cfg = load_config(s.config);
  for (uint64_t k = 0; k < count; ++k) {
    ScanSettings settings;
    settings.shard = Shard{k, count, "--shard", 0};
    std::ostringstream log;
    Aggregator agg(cfg, settings, log);
    replay_into(agg, cfg, settings.shard);
    const ScanResult r = agg.result(agg.end_state());
    s.parts.push_back(s.dir.file("part-" + std::to_string(k) + ".json"));
    std::ofstream(s.parts.back()) << r.partial.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
  }
  ScanSettings settings;
  std::ostringstream log;
  Aggregator agg(cfg, settings, log);
  replay_into(agg, cfg, std::nullopt);
  s.whole = agg.result(agg.end_state()).report.dump();
  return s;
}

// A part read, changed and written back.
void edit(const std::string& part, const std::function<void(ojson&)>& change) {
  std::ifstream in(part);
  ojson j = ojson::parse(in);
  change(j);
  std::ofstream(part) << j.dump() << "\n";
}

// The error merge stops at, as the CLI prints it ("" when the parts merge).
std::string merge_error(const std::vector<std::string>& parts) {
  try {
    std::ostringstream log;
    merge_parts(MergeInput{parts, FailOn::Error}, log);
  } catch (const InputError& e) {
    return format_error(e);
  }
  return "";
}

// The entry of `steps` that holds step `step`'s journal lines.
ojson& step_entry(ojson& part, uint64_t step) {
  for (ojson& s : part["steps"]) {
    if (s["step"] == step) return s;
  }
  throw std::runtime_error("no lines for step " + std::to_string(step));
}

}  // namespace

// The parts as written merge into the whole scan's report, byte for byte: the checks below
// refuse nothing a scan writes.
TEST(ShardMerge, PartsAsWrittenMergeIntoTheWholeScansReport) {
  Scan s = sharded_scan("valid", 3);
  std::ostringstream log;
  const ScanResult r = merge_parts(MergeInput{{s.parts[2], s.parts[0], s.parts[1]}, FailOn::Error}, log);
  EXPECT_EQ(r.report.dump(), s.whole);
  EXPECT_TRUE(r.failed);
  EXPECT_EQ(r.report["batches"]["checked"], 8);
  EXPECT_EQ(merge_error({s.parts[0], s.parts[1]}), "batchcheck: error: merge: 1 shard missing: 2/3 (given 2 parts)");
}

// 300,000 ranks where the config says 2: merge sized the plots and the report by it (102 MB).
TEST(ShardMerge, RanksBeyondTheConfigsWorldSizeAreRefused) {
  Scan s = sharded_scan("ranks", 2);
  edit(s.parts[0], [](ojson& j) {
    ojson ranks = ojson::array();
    for (uint64_t r = 0; r < 300000; ++r) ranks.push_back(r);
    j["start"]["ranks"] = ranks;
  });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": start.ranks: 300000 ranks, but the part's config has world_size 2 (ranks 0..1): "
                                      "the part was edited");
  edit(s.parts[0], [](ojson& j) { j["start"]["ranks"] = ojson::parse("[0, 5]"); });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": start.ranks[1]: rank 5, but the part's config has world_size 2 (ranks 0..1): "
                                      "the part was edited");
  edit(s.parts[0], [](ojson& j) { j["start"]["ranks"] = ojson::parse("[0, -1]"); });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": start.ranks[1]: -1 is not a count (a non-negative integer): the part was edited");
  // Another part's ranks against the first's.
  Scan t = sharded_scan("ranks-other", 2);
  edit(t.parts[1], [](ojson& j) { j["start"]["ranks"] = ojson::parse("[1]"); });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[1] + ": start.ranks: rank 1, but " + t.parts[0] +
                                      " says ranks 0..1: the part was edited");
}

// A part claiming 2^64-1 samples where the other says 30: the suggestions came from it.
TEST(ShardMerge, SamplesOtherThanTheOtherPartsAreRefused) {
  Scan s = sharded_scan("samples", 2);
  edit(s.parts[1], [](ojson& j) { j["start"]["data"]["samples"] = UINT64_MAX; });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[1] + ": start.data.samples: 18446744073709551615, but " +
                                      s.parts[0] + " says 30: the part was edited");
  // In the first part, against its own config: its steps are those of 30 samples.
  Scan t = sharded_scan("samples-first", 2);
  edit(t.parts[0], [](ojson& j) { j["start"]["data"]["samples"] = UINT64_MAX; });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[0] +
                                      ": start.replay_steps: 8, but start.data.samples 18446744073709551615 make "
                                      "4611686018427387904 with the part's config (2 ranks of 2305843009213693952 batches): "
                                      "the part was edited");
  edit(t.parts[0], [](ojson& j) { j["start"]["data"]["samples"] = -30; });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[0] +
                                      ": start.data.samples: -30 is not a count (a non-negative integer): the part was edited");
}

// A batch of -5 became 18446744073709551611; a batch of 7 where the plan has 3.
TEST(ShardMerge, BatchSizesOtherThanThePlansAreRefused) {
  Scan s = sharded_scan("sizes", 3);
  // Shard 0 keeps step 3 (rank 0's last batch, 3 samples, a finding) as journal lines: steps[1].
  edit(s.parts[0], [](ojson& j) { step_entry(j, 3)["lines"][0]["at"]["size"] = -5; });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": steps[1].lines[0].at.size: -5 is not a count (a non-negative integer): the part was edited");
  edit(s.parts[0], [](ojson& j) { step_entry(j, 3)["lines"][0]["at"]["size"] = 7; });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": steps[1].lines[0].at.size: a batch of 7, but batch 3 of rank 0 holds 3: the part was edited");
  edit(s.parts[0], [](ojson& j) {
    step_entry(j, 3)["lines"][0]["at"]["size"] = 3;
    step_entry(j, 3)["lines"][2]["size"] = 2.5;
  });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": steps[1].lines[2].size: 2.5 is not a count (a non-negative integer): the part was edited");
  // A compact row: step 6 is rank 1's batch 2, of 4.
  edit(s.parts[0], [](ojson& j) {
    step_entry(j, 3)["lines"][2]["size"] = 3;
    std::string rows = j["clean"]["rows"].get<std::string>();
    const std::string row = "6 1 2 0 4 ";
    ASSERT_NE(rows.find(row), std::string::npos) << rows;
    rows.replace(rows.find(row), row.size(), "6 1 2 0 9 ");
    j["clean"]["rows"] = rows;
  });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": clean: row 1: a batch of 9, but batch 2 of rank 1 holds 4: the part was edited");
}

// A step past the replay's steps was taken for a probe.
TEST(ShardMerge, StepsBeyondThePlanAreRefused) {
  Scan s = sharded_scan("beyond", 3);
  edit(s.parts[0], [](ojson& j) { j["clean"]["rows"] = j["clean"]["rows"].get<std::string>() + "12 - - 1 1 1 - - - - - - -\n"; });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": clean: row 3: step 12 is not in the scan's plan (replay steps 0..7, probe step 8): "
                                      "the part was edited");
  // The probe of 64 never runs on 30 samples.
  Scan t = sharded_scan("beyond-probe", 3);
  edit(t.parts[0], [](ojson& j) { j["clean"]["rows"] = j["clean"]["rows"].get<std::string>() + "9 - - 1 64 1 - - - - - - -\n"; });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[0] +
                                      ": clean: row 3: step 9 is not in the scan's plan (replay steps 0..7, probe step 8): "
                                      "the part was edited");
  // Journal lines moved past the plan.
  Scan u = sharded_scan("beyond-lines", 3);
  edit(u.parts[0], [](ojson& j) { step_entry(j, 3)["step"] = 300000; });
  EXPECT_EQ(merge_error(u.parts), "batchcheck: error: " + u.parts[0] +
                                      ": steps[1].step: step 300000 is not in the scan's plan (replay steps 0..7, probe step 8): "
                                      "the part was edited");
}

// A step told twice within its lines counted twice (batches checked, the plots).
TEST(ShardMerge, AStepEndedTwiceIsRefused) {
  Scan s = sharded_scan("twice", 3);
  edit(s.parts[0], [](ojson& j) {
    ojson& lines = step_entry(j, 3)["lines"];
    lines.push_back(lines[0]);
    lines.push_back(lines[2]);
  });
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: " + s.parts[0] +
                                      ": steps[1].lines[3]: a begin after step 3 ended (lines[2]): the part was edited");
  // Lines of another step under this one's number.
  Scan t = sharded_scan("twice-other", 3);
  edit(t.parts[0], [](ojson& j) { step_entry(j, 3)["lines"][2]["step"] = 0; });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[0] +
                                      ": steps[1].lines[2].step: step 0 in the lines of step 3: the part was edited");
}

// The shard's index and count are counts too; a count of 10^12 lists a few of the missing shards.
TEST(ShardMerge, ShardIndexAndCountAreCheckedCounts) {
  Scan s = sharded_scan("count", 2);
  edit(s.parts[0], [](ojson& j) { j["shard"]["count"] = -1; });
  EXPECT_EQ(merge_error(s.parts),
            "batchcheck: error: " + s.parts[0] + ": shard.count: -1 is not a count (a non-negative integer): the part was edited");
  edit(s.parts[0], [](ojson& j) { j["shard"]["count"] = 2; j["shard"]["index"] = -1; });
  EXPECT_EQ(merge_error(s.parts),
            "batchcheck: error: " + s.parts[0] + ": shard.index: -1 is not a count (a non-negative integer): the part was edited");
  for (const auto& p : s.parts) {
    edit(p, [](ojson& j) {
      if (j["shard"]["index"] == -1) j["shard"]["index"] = 0;
      j["shard"]["count"] = 1000000000000;
    });
  }
  EXPECT_EQ(merge_error(s.parts), "batchcheck: error: merge: 999999999998 shards missing: 2/1000000000000, 3/1000000000000, "
                                  "4/1000000000000, 5/1000000000000, 6/1000000000000, 7/1000000000000, 8/1000000000000, "
                                  "9/1000000000000, 10/1000000000000, 11/1000000000000 and 999999999988 more (given 2 parts)");
  // The scan's settings, as each part says them.
  Scan t = sharded_scan("settings", 2);
  edit(t.parts[1], [](ojson& j) { j["config"]["max_batches"] = -5; });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[1] +
                                      ": config.max_batches: -5 is not a count (a non-negative integer): the part was edited");
  edit(t.parts[1], [](ojson& j) { j["config"]["max_batches"] = 1; });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[1] + ": config.max_batches: 1, but " + t.parts[0] +
                                      " says 0: the part was edited");
  edit(t.parts[1], [](ojson& j) {
    j["config"]["max_batches"] = 0;
    j["config"]["text"] = std::string(kConfig) + " ";
  });
  EXPECT_EQ(merge_error(t.parts), "batchcheck: error: " + t.parts[1] + ": config.text: is not the config " + t.parts[0] +
                                      " was scanned with: the part was edited");
}
