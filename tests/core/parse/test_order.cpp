// loader.order: the recorded batches parsed with errors in the user's terms, and the
// geometry and batches they give.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "core/base/errors.h"
#include "core/findings/findings.h"
#include "core/parse/order.h"
#include "core/plan/geometry.h"

using namespace batchcheck;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_order("order.json", text);
  } catch (const InputError& e) {
    return format_error(e);
  }
  return "(no error)";
}

Geometry recorded(const std::string& text, uint64_t samples, uint64_t batch_size) {
  LoaderSpec spec;
  spec.samples = samples;
  spec.batch_size = batch_size;
  spec.recorded = std::make_shared<const RecordedOrder>(parse_order("order.json", text));
  return compute_geometry(spec);
}

}  // namespace

TEST(Order, ParsesOneRankOrOnePerRank) {
  RecordedOrder one = parse_order("order.json", "[[3, 1], [0, 2, 4], [5]]");
  ASSERT_EQ(one.ranks.size(), 1u);
  EXPECT_EQ(one.ranks[0][1], (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(one.largest_batch, 3u);
  EXPECT_EQ(one.max_index, 5u);
  RecordedOrder two = parse_order("order.json", R"({"samples": 6, "ranks": [[[0, 2], [4]], [[1, 3], [5]]]})");
  EXPECT_EQ(two.ranks.size(), 2u);
  EXPECT_EQ(two.samples, 6u);
}

TEST(Order, ErrorsNameTheElement) {
  EXPECT_EQ(error_of("[[0, 1], []]"), "batchcheck: error: order.json: [1]: an empty batch: a DataLoader never delivers one");
  EXPECT_EQ(error_of("[[0, -1]]"), "batchcheck: error: order.json: [0][1]: expected a sample index (an integer >= 0), got -1");
  EXPECT_EQ(error_of("[[0, 1.5]]"), "batchcheck: error: order.json: [0][1]: expected a sample index (an integer >= 0), got 1.5");
  EXPECT_EQ(error_of("[3, 4]"), "batchcheck: error: order.json: [0]: expected a batch: an array of sample indices, got 3");
  EXPECT_EQ(error_of("\"x\""), "batchcheck: error: order.json: expected an array of batches, or {\"ranks\": [...]} with one per rank, got \"x\"");
  EXPECT_EQ(error_of(R"({"rank": []})"), "batchcheck: error: order.json: rank: unknown key; did you mean \"ranks\"?");
  EXPECT_EQ(error_of(R"({"ranks": [[[0], [1]], [[2]]]})"),
            "batchcheck: error: order.json: ranks[1]: holds 1 batches but rank 0 holds 2: DDP ranks must run the same "
            "number of batches (the one with more waits forever in its gradient all-reduce)");
  EXPECT_EQ(error_of(R"({"ranks": [[[0], [7]]]})"), "(no error)");
}

TEST(Order, DoesNotFitOtherData) {
  EXPECT_THROW(recorded(R"({"samples": 9, "ranks": [[[0]]]})", 8, 1), InputError);
  try {
    recorded(R"({"samples": 9, "ranks": [[[0]]]})", 8, 1);
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: order.json: samples: the order was recorded for 9 samples but the "
                               "dataset holds 8: record it again from this data");
  }
  try {
    recorded(R"({"ranks": [[[0], [1]], [[2], [8]]]})", 8, 1);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: order.json: ranks[1][1][0]: sample index 8 is outside the dataset's 8 "
                               "samples (0..7): the order was recorded for other data");
  }
}

TEST(Order, GeometryAndBatchesComeFromTheRecord) {
  // A bucketing batch sampler: sizes 3, 2, 1; sample 5 drawn twice, 4 and 6 never.
  Geometry g = recorded("[[3, 1, 0], [5, 2], [5]]", 7, 3);
  EXPECT_TRUE(g.recorded());
  EXPECT_EQ(g.batches_per_rank, 3u);
  EXPECT_EQ(g.samples_per_rank, 6u);
  EXPECT_EQ(g.last_batch_size, 1u);
  EXPECT_EQ(g.batch_size_at(1), 2u);
  EXPECT_EQ(g.dropped_total(), 2u);
  EXPECT_EQ(g.delivered_padding(), 0u);
  BatchPlan plan(g, {});
  EXPECT_EQ(plan.batch_indices(0, 1), (std::vector<int64_t>{5, 2}));
  std::vector<Finding> fs = geometry_findings(plan, {0}, LossType::CrossEntropy);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].id, "tail-batch-singleton");
  EXPECT_EQ(fs[0].message, "the last batch (index 2) of the recorded order (order.json) holds a single sample; BatchNorm "
                           "in train mode, .squeeze() and view(3, -1) break on a batch of one");
  EXPECT_EQ(fs[0].samples, (std::vector<int64_t>{5}));
  EXPECT_EQ(fs[1].id, "samples-dropped");
  EXPECT_EQ(fs[1].samples, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(fs[1].count, 2u);

  // Two ranks, each ending on a partial batch of 2 of 3.
  Geometry two = recorded(R"({"ranks": [[[0, 2, 4], [6, 8]], [[1, 3, 5], [7, 9]]]})", 10, 3);
  EXPECT_EQ(two.spec.world_size, 2u);
  BatchPlan p2(two, {});
  EXPECT_EQ(p2.batch_indices(1, 1), (std::vector<int64_t>{7, 9}));
  std::vector<Finding> f2 = geometry_findings(p2, {0, 1}, LossType::CrossEntropy);
  ASSERT_EQ(f2.size(), 1u);
  EXPECT_EQ(f2[0].id, "tail-batch-partial");
  EXPECT_EQ(f2[0].occurrences.size(), 2u);
  // Full batches but the last (a shuffled loader's order): the tail as for any loader, with
  // the arithmetic and DataLoader's own fixes.
  EXPECT_TRUE(two.recorded_uniform);
  EXPECT_FALSE(g.recorded_uniform);
  EXPECT_EQ(f2[0].message, "the last batch (index 1) holds 2 of 3 samples on each of the 2 ranks (5 samples per rank): 5 = 1 x 3 + 2");
  ASSERT_FALSE(f2[0].fixes.empty());
  EXPECT_EQ(f2[0].fixes[0].id, "drop-last");
}

// Issue 29 (9): what a recorded order costs is bounded by the order, never by the dataset,
// and the order itself is bounded.
TEST(Order, AHugeDatasetCostsTheOrdersMemoryNotTheDatasets) {
  // A zero-width .npy may claim 2^61 samples: a bitmap of them would be 256 PiB.
  Geometry g = recorded("[[0, 5], [5, 2]]", uint64_t{1} << 61, 2);
  EXPECT_EQ(g.recorded_undelivered, (uint64_t{1} << 61) - 3);
  EXPECT_EQ(g.dropped_total(), (uint64_t{1} << 61) - 3);
  EXPECT_EQ(g.samples_per_rank, 4u);
}

TEST(Order, MoreRanksThanAReplayHoldsAreRefused) {
  std::string ranks = "{\"ranks\": [[]";
  for (uint64_t r = 1; r < kMaxWorldSize; ++r) ranks += ", []";
  EXPECT_EQ(parse_order("order.json", ranks + "]}").ranks.size(), kMaxWorldSize);
  EXPECT_EQ(error_of(ranks + ", []]}"), "batchcheck: error: order.json: ranks[1048576]: more than 1048576 ranks (2^20), the "
                                        "most batchcheck replays: it checks every rank and keeps state for each");
}

TEST(Order, BatchesPastTheMemoryBoundAreRefusedWhereTheyAre) {
  // A rank costs 24 bytes, a batch 56, an index 8: the third index passes 96 bytes.
  EXPECT_EQ(parse_order("order.json", "[[0, 1], [2]]", 160).ranks[0].size(), 2u);
  try {
    parse_order("order.json", "[[0, 1, 2], [3, 4]]", 96);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: order.json: [0][2]: the recorded batches take more than 96 bytes in memory "
                               "by here (8 bytes a sample index, 56 a batch), the most batchcheck holds of a recorded order");
  }
}

TEST(Order, StreamedFromTheFileWithErrorsInTheUsersTerms) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("batchcheck_order_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto load_error = [&](const std::string& text) {
    std::ofstream((dir / "order.json").string()) << text;
    try {
      load_order("order.json", (dir / "order.json").string());
    } catch (const InputError& e) {
      return format_error(e);
    }
    return std::string("(no error)");
  };
  std::ofstream((dir / "ok.json").string()) << R"({"samples": 4, "ranks": [[[0, 2]], [[1, 3]]]})";
  RecordedOrder ok = load_order("ok.json", (dir / "ok.json").string());
  EXPECT_EQ(ok.ranks[1][0], (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(ok.samples, 4u);
  EXPECT_EQ(load_error("[[0, 1],\n [2,, 3]]"),
            "batchcheck: error: order.json: 2:5: syntax error while parsing value - unexpected ','; expected '[', '{', or a literal");
  EXPECT_EQ(load_error("  \n"), "batchcheck: error: order.json: 1:1: the file is empty; expected a JSON object");
  EXPECT_EQ(load_error("[[0, 1e99999]]"), "batchcheck: error: order.json: 1:6: number overflow parsing '1e99999'");
  EXPECT_EQ(load_error("[[0],\n [1],\n [1e99999]]"), "batchcheck: error: order.json: 3:3: number overflow parsing '1e99999'");
  EXPECT_EQ(error_of("[[0],\n [1],\n [1e99999]]"), "batchcheck: error: order.json: 3:3: number overflow parsing '1e99999'");
  EXPECT_EQ(load_error(R"({"samples": -1, "ranks": [[[0]]]})"),
            "batchcheck: error: order.json: samples: expected a non-negative integer, got -1");
  EXPECT_EQ(load_error(R"({"samples": 1})"), "batchcheck: error: order.json: ranks: missing required key");
  EXPECT_EQ(load_error(R"({"ranks": []})"),
            "batchcheck: error: order.json: ranks: expected an array with one array of batches per rank, got an array");
  EXPECT_EQ(load_error(R"({"ranks": [[[0]], 3]})"),
            "batchcheck: error: order.json: ranks[1]: expected an array of batches (arrays of sample indices), got 3");
  EXPECT_EQ(load_error(R"({"ranks": [[[0], {"a": 1}]]})"),
            "batchcheck: error: order.json: ranks[0][1]: expected a batch: an array of sample indices, got an object");
  EXPECT_EQ(load_error("[[0, [1]]]"), "batchcheck: error: order.json: [0][1]: expected a sample index (an integer >= 0), got an array");
  EXPECT_EQ(load_error("[[0]] [[1]]"),
            "batchcheck: error: order.json: 1:7: syntax error while parsing value - unexpected '['; expected end of input");
  fs::remove_all(dir);
}
