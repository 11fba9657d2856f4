// Differential test: our batch plan against PyTorch's own DataLoader/DistributedSampler.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/base/errors.h"
#include "core/config/config.h"
#include "engine/data/permutation.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using batchcheck::test_util::python_torch_available;
using batchcheck::test_util::run_command;

TEST(Oracle, BatchPlanMatchesPyTorchIndexForIndex) {
  if (!python_torch_available()) {
    GTEST_SKIP() << test_util::python_missing_line("the PyTorch oracle");
  }
  auto r = run_command(test_util::python() + " " BATCHCHECK_SOURCE_DIR "/tests/e2e/oracle/dataloader_oracle.py");
  ASSERT_EQ(r.status, 0) << "the oracle script failed";
  std::istringstream lines(r.output);
  std::string line;
  int setups = 0;
  int errors = 0, one_replica = 0, negative_seeds = 0;
  while (std::getline(lines, line)) {
    auto c = nlohmann::json::parse(line);
    // Through the config, as a user writes it: sampler defaults, seeds, overflow checks.
    nlohmann::json loader = {{"batch_size", c["b"]},       {"drop_last", c["drop_last"]}, {"shuffle", c["shuffle"]},
                             {"seed", c["seed"]},          {"epoch", c["epoch"]},         {"world_size", c["w"]},
                             {"sampler_drop_last", c["sampler_drop_last"]}};
    if (c.contains("sampler")) {
      loader["sampler"] = c["sampler"];
      ++one_replica;
    }
    if (c["seed"].is_number_integer() && !c["seed"].is_number_unsigned()) ++negative_seeds;
    nlohmann::json cfg_json = {{"model", {{"path", "m.pt"}}}, {"data", {{"inputs", "x.npy"}}}, {"loader", loader}};
    std::string where = "setup " + c.dump().substr(0, 200);
    if (c.contains("error")) {
      // PyTorch refuses this setup before training starts: so does batchcheck (exit 2).
      try {
        parse_config("cfg.json", cfg_json.dump(), "/");
        ADD_FAILURE() << where << ": PyTorch raises " << c["error"] << ", batchcheck accepted it";
      } catch (const InputError& e) {
        EXPECT_NE(format_error(e).find(c["error"].get<std::string>()), std::string::npos) << format_error(e);
      }
      ++errors;
      continue;
    }
    Config cfg = parse_config("cfg.json", cfg_json.dump(), "/");
    LoaderSpec s = loader_spec(cfg.loader, c["n"]);
    BatchPlan plan = make_batch_plan(s);
    const auto& ranks = c["ranks"];
    ASSERT_EQ(ranks.size(), s.world_size) << where;
    for (uint64_t rank = 0; rank < s.world_size; ++rank) {
      const auto& expected = ranks[rank];
      std::string at = where + " rank " + std::to_string(rank);
      ASSERT_EQ(plan.geometry().batches_per_rank, expected.size()) << at;
      for (uint64_t b = 0; b < expected.size(); ++b) {
        ASSERT_EQ(plan.batch_indices(rank, b), expected[b].get<std::vector<int64_t>>()) << at << " batch " << b;
      }
    }
    // Count for count, in distinct samples.
    EXPECT_EQ(plan.geometry().dropped_total(), c["dropped"].get<uint64_t>()) << where;
    EXPECT_EQ(plan.geometry().delivered_padding(), c["padded_delivered"].get<uint64_t>()) << where;
    ++setups;
  }
  EXPECT_EQ(errors, 1);
  EXPECT_GE(one_replica, 4);
  EXPECT_GE(negative_seeds, 5);
  EXPECT_GT(setups, 1000);
}
