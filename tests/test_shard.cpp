// Shards: which part of the scan a process takes, from --shard or its launcher's variables.
#include <gtest/gtest.h>

#include <map>

#include "core/errors.h"
#include "core/clean_rows.h"
#include "core/shard.h"

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
