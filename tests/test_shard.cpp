// Shards: which part of the scan a process takes, from --shard or its launcher's variables.
#include <gtest/gtest.h>

#include <map>

#include "core/errors.h"
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
  std::vector<uint64_t> order;
  for (const auto& [step, lines] : log.all_lines()) order.push_back(step);
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 1, 3, 5, 9, 12}));
}
