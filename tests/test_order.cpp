// loader.order: the recorded batches parsed with errors in the user's terms, and the
// geometry and batches they give.
#include <gtest/gtest.h>

#include <memory>

#include "core/errors.h"
#include "core/findings.h"
#include "core/geometry.h"
#include "core/order.h"

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
  EXPECT_EQ(f2[0].message, "the last batch (index 1) of the recorded order (order.json) holds 2 of 3 samples on ranks 0, 1");
}
