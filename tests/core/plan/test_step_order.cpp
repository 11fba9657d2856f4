// The order of a replay's steps: in turn; with --fail-fast every rank's first and last batch
// first; only the steps this process runs (its shard, a resumed replay's).
#include <gtest/gtest.h>

#include <vector>

#include "core/base/errors.h"
#include "core/plan/step_order.h"

using namespace batchcheck;

namespace {

std::vector<uint64_t> all(const StepOrder& order, uint64_t from = 0) {
  std::vector<uint64_t> out;
  StepOrder::Cursor c = order.start(from);
  while (auto s = order.next(c)) out.push_back(*s);
  return out;
}

}  // namespace

TEST(StepOrder, InTurnOrEdgesFirst) {
  auto every = [](uint64_t) { return true; };
  EXPECT_EQ(all(StepOrder(2, 4, false, every)), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(all(StepOrder(2, 4, true, every)), (std::vector<uint64_t>{0, 3, 4, 7, 1, 2, 5, 6}));
  EXPECT_EQ(all(StepOrder(3, 1, true, every)), (std::vector<uint64_t>{0, 1, 2}));  // one batch per rank
  EXPECT_EQ(all(StepOrder(2, 0, true, every)), (std::vector<uint64_t>{}));
}

TEST(StepOrder, OnlyTheStepsThisProcessRuns) {
  // Shard 1 of 2, resumed at step 4 (the steps below it ended).
  auto runs = [](uint64_t s) { return s % 2 == 1 && s >= 4; };
  EXPECT_EQ(all(StepOrder(2, 4, true, runs), 4), (std::vector<uint64_t>{7, 5}));
  EXPECT_EQ(all(StepOrder(2, 4, false, runs), 4), (std::vector<uint64_t>{5, 7}));
}

TEST(ReplaySteps, RanksAndBatchesTaken) {
  EXPECT_EQ(replay_ranks(3, std::nullopt), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(replay_ranks(3, 2), (std::vector<uint64_t>{2}));
  try {
    replay_ranks(2, 2);
    ADD_FAILURE() << "rank 2 of 2 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where() + ": " + e.detail(), "--rank: rank 2 does not exist with world_size 2 (ranks are 0..1)");
  }
  // A recorded rank share: the order's one rank (index 0) is named by its own rank.
  EXPECT_EQ(replay_ranks(1, std::nullopt, 3), (std::vector<uint64_t>{0}));
  EXPECT_EQ(replay_ranks(1, 3, 3), (std::vector<uint64_t>{0}));
  try {
    replay_ranks(1, 0, 3);
    ADD_FAILURE() << "rank 0 of rank 3's share accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where() + ": " + e.detail(), "--rank: rank 0 is not in the recorded order: it holds rank 3's share "
                                             "(loader.order_rank); use --rank 3 or leave --rank out");
  }
  EXPECT_EQ(replay_batches(5, false, 0), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(replay_batches(5, false, 2), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(replay_batches(5, false, 9), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(replay_batches(5, true, 0), (std::vector<uint64_t>{0, 4}));
  EXPECT_EQ(replay_batches(1, true, 0), (std::vector<uint64_t>{0}));
  EXPECT_TRUE(replay_batches(0, false, 0).empty());
}
