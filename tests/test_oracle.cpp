// Differential test: our batch plan against PyTorch's own DataLoader/DistributedSampler.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/permutation.h"
#include "test_helpers.h"

using namespace batchcheck;
using batchcheck::test_util::python_torch_available;
using batchcheck::test_util::run_command;

TEST(Oracle, BatchPlanMatchesPyTorchIndexForIndex) {
  if (!python_torch_available()) {
    GTEST_SKIP() << "python3-torch is not installed for /usr/bin/python3: the PyTorch oracle cannot run "
                    "(scripts/setup.sh installs it)";
  }
  auto r = run_command("/usr/bin/python3 " BATCHCHECK_SOURCE_DIR "/tests/oracle/dataloader_oracle.py");
  ASSERT_EQ(r.status, 0) << "the oracle script failed";
  std::istringstream lines(r.output);
  std::string line;
  int setups = 0;
  while (std::getline(lines, line)) {
    auto c = nlohmann::json::parse(line);
    LoaderSpec s;
    s.samples = c["n"];
    s.batch_size = c["b"];
    s.world_size = c["w"];
    s.drop_last = c["drop_last"];
    s.shuffle = c["shuffle"];
    s.seed = c["seed"];
    s.epoch = c["epoch"];
    s.sampler_drop_last = c["sampler_drop_last"];
    BatchPlan plan = make_batch_plan(s);
    const auto& ranks = c["ranks"];
    ASSERT_EQ(ranks.size(), s.world_size) << line.substr(0, 200);
    for (uint64_t rank = 0; rank < s.world_size; ++rank) {
      const auto& expected = ranks[rank];
      std::string where = "setup " + c.dump().substr(0, 160) + " rank " + std::to_string(rank);
      ASSERT_EQ(plan.geometry().batches_per_rank, expected.size()) << where;
      for (uint64_t b = 0; b < expected.size(); ++b) {
        ASSERT_EQ(plan.batch_indices(rank, b), expected[b].get<std::vector<int64_t>>()) << where << " batch " << b;
      }
    }
    ++setups;
  }
  EXPECT_GT(setups, 1000);
}
