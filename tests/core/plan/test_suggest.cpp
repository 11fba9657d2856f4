#include <gtest/gtest.h>

#include "core/plan/suggest.h"

using namespace batchcheck;

namespace {
std::vector<uint64_t> sizes(const Suggestion& s) {
  std::vector<uint64_t> out;
  for (const auto& c : s.nearest) out.push_back(c.batch_size);
  return out;
}
}  // namespace

TEST(Suggest, SeedCase) {
  SuggestRequest r;
  r.samples = 1041;
  r.batch_size = 8;
  Suggestion s = suggest(r);
  EXPECT_EQ(s.divisors, (std::vector<uint64_t>{1, 3, 347, 1041}));
  // 1041 % 5 == 1041 % 4 == 1041 % 10 == 1 are skipped: a tail of one is what we avoid.
  EXPECT_EQ(sizes(s), (std::vector<uint64_t>{3, 6, 7, 9, 11, 12}));
  EXPECT_EQ(s.nearest[0].tail, 0u);
  EXPECT_EQ(s.nearest[2].tail, 5u);
  EXPECT_EQ(s.nearest[2].batches, 149u);
  EXPECT_EQ(s.nearest[2].dropped_with_drop_last, 5u);
  auto j = to_json(s);
  EXPECT_EQ(j["samples"], 1041);
  EXPECT_EQ(j["per_rank_samples"], 1041);
  EXPECT_EQ(j["tail"], 1);
  EXPECT_EQ(j["divisors"], nlohmann::ordered_json({1, 3, 347, 1041}));
  EXPECT_EQ(j["nearest"][3], nlohmann::ordered_json({{"batch_size", 9}, {"tail", 6}, {"batches", 116}, {"dropped_with_drop_last", 6}}));
  EXPECT_FALSE(j.contains("accumulation"));
}

TEST(Suggest, MinTailAndWorldSize) {
  SuggestRequest r;
  r.samples = 1028;
  r.batch_size = 8;
  r.world_size = 4;
  r.min_tail = 4;
  Suggestion s = suggest(r);
  EXPECT_EQ(s.geometry.samples_per_rank, 257u);
  EXPECT_EQ(s.divisors, (std::vector<uint64_t>{1, 257}));
  for (const auto& c : s.nearest) {
    EXPECT_TRUE(c.tail == 0 || c.tail >= 4) << c.batch_size;
    EXPECT_EQ(c.dropped_with_drop_last, c.tail * 4);
  }
  // 5, 4, 3 and 2 leave tails of 2, 1, 2, 1; batch size 1 is never suggested.
  EXPECT_EQ(sizes(s), (std::vector<uint64_t>{6, 7, 9, 10, 11}));
}

TEST(Suggest, AccumulationView) {
  SuggestRequest r;
  r.samples = 1041;
  r.batch_size = 8;
  r.accumulation_steps = 4;
  auto j = to_json(suggest(r));
  EXPECT_EQ(j["accumulation"]["windows"], 33);
  EXPECT_EQ(j["accumulation"]["last_window_batches"], 3);
  EXPECT_EQ(j["accumulation"]["partial_last_window"], true);
}

TEST(Suggest, HugePrimeIsFastAndExact) {
  SuggestRequest r;
  r.samples = UINT64_MAX - 58;
  r.batch_size = 1024;
  Suggestion s = suggest(r);
  EXPECT_EQ(s.divisors, (std::vector<uint64_t>{1, UINT64_MAX - 58}));
  EXPECT_EQ(to_json(s)["samples"].get<uint64_t>(), UINT64_MAX - 58);
  EXPECT_EQ(s.nearest.size(), 6u);
}

TEST(Suggest, TinyDatasets) {
  SuggestRequest r;
  r.samples = 0;
  r.batch_size = 8;
  Suggestion s = suggest(r);
  EXPECT_TRUE(s.divisors.empty());
  EXPECT_TRUE(s.nearest.empty());
  r.samples = 5;
  s = suggest(r);
  EXPECT_EQ(sizes(s), (std::vector<uint64_t>{3, 5}));  // 4 and 2 leave a tail of 1
}

TEST(Suggest, NearestDivisors) {
  std::vector<uint64_t> d = {1, 2, 3, 4, 6, 12};
  EXPECT_EQ(nearest_divisors(d, 5, 2), (std::vector<uint64_t>{3, 4, 6, 12}));
  EXPECT_EQ(nearest_divisors(d, 4, 1), (std::vector<uint64_t>{3, 4, 6}));
  EXPECT_EQ(nearest_divisors(d, 100, 2), (std::vector<uint64_t>{6, 12}));
}

TEST(Suggest, TableShowsTheNumbers) {
  SuggestRequest r;
  r.samples = 1041;
  r.batch_size = 8;
  std::string t = format_table(suggest(r));
  EXPECT_NE(t.find("Exact divisors of 1041: 1, 3, 347, 1041"), std::string::npos) << t;
  EXPECT_NE(t.find("batches per rank: 131 (130 full, the last holds 1 sample)"), std::string::npos) << t;
}

// A momentum encoder's queue of 256 asserts K % batch_size == 0 on every batch it gets: with 92
// samples and a batch of 24 the batches are 24 and 20, and 24 fails. The sizes offered divide
// 256 and leave a last batch that divides it too (or none): 8 (a last batch of 4), 4, 2; not 23
// (it divides 92, not 256), not 16 or 32 (their last batches, 12 and 28, do not divide 256).
TEST(Suggest, TheStepsOwnConstraintsHoldForEveryBatchTheLastToo) {
  SuggestRequest r;
  r.samples = 92;
  r.batch_size = 24;
  r.divides = {256};
  Suggestion s = suggest(r);
  EXPECT_EQ(s.requested_broken, "24 does not divide 256 (--divides)");
  EXPECT_EQ(sizes(s), (std::vector<uint64_t>{2, 4, 8}));
  EXPECT_EQ(s.nearest[2].tail, 4u);
  // With drop_last the last batch is never delivered: only full batches must divide K.
  r.drop_last = true;
  s = suggest(r);
  EXPECT_EQ(sizes(s), (std::vector<uint64_t>{4, 8, 16, 32, 64}));
  EXPECT_EQ(s.requested_broken, "24 does not divide 256 (--divides)");
  // Mixup's even batch: every batch a multiple of 2, the last included.
  SuggestRequest m;
  m.samples = 101;
  m.batch_size = 16;
  m.multiple_of = {2};
  s = suggest(m);
  EXPECT_EQ(s.requested_broken, "the last batch of 5 is not a multiple of 2 (--multiple-of)");
  EXPECT_TRUE(s.nearest.empty()) << "101 is odd: some batch is always odd without drop_last";
  auto j = to_json(s);
  EXPECT_EQ(j["multiple_of"], nlohmann::ordered_json({2}));
  EXPECT_EQ(j["requested_ok"], false);
  EXPECT_NE(format_table(s).find("batch size 16 fails your step's constraint: the last batch of 5 is not a multiple of 2 (--multiple-of)"),
            std::string::npos)
      << format_table(s);
}
