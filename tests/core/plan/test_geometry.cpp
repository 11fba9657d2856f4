#include <gtest/gtest.h>

#include "core/base/errors.h"
#include "core/base/sanitizer.h"
#include "core/plan/geometry.h"

using namespace batchcheck;

namespace {
LoaderSpec spec(uint64_t n, uint64_t b, uint64_t w = 1, bool drop_last = false, bool sampler_drop_last = false,
                uint64_t k = 1) {
  LoaderSpec s;
  s.samples = n;
  s.batch_size = b;
  s.world_size = w;
  s.drop_last = drop_last;
  s.sampler_drop_last = sampler_drop_last;
  s.accumulation_steps = k;
  return s;
}
}  // namespace

TEST(Geometry, SeedCaseEndsOnABatchOfOne) {
  Geometry g = compute_geometry(spec(1041, 8));
  EXPECT_EQ(g.samples_per_rank, 1041u);
  EXPECT_EQ(g.batches_per_rank, 131u);
  EXPECT_EQ(g.full_batches, 130u);
  EXPECT_EQ(g.last_batch_size, 1u);
  EXPECT_EQ(g.dropped_total(), 0u);
  EXPECT_EQ(g.batch_size_at(0), 8u);
  EXPECT_EQ(g.batch_size_at(130), 1u);
  EXPECT_EQ(g.batch_size_at(131), 0u);
}

TEST(Geometry, DropLast) {
  Geometry g = compute_geometry(spec(1041, 8, 1, true));
  EXPECT_EQ(g.batches_per_rank, 130u);
  EXPECT_EQ(g.last_batch_size, 8u);
  EXPECT_EQ(g.loader_dropped_per_rank, 1u);
  EXPECT_EQ(g.dropped_total(), 1u);
}

TEST(Geometry, DistributedPaddingGivesEveryRankATailOfOne) {
  // FIELD-NOTES: N=1028, W=4, B=8: 1028 mod 8 = 4, yet every rank ends on a batch of 1.
  Geometry g = compute_geometry(spec(1028, 8, 4));
  EXPECT_EQ(g.samples_per_rank, 257u);
  EXPECT_EQ(g.padded_samples, 0u);
  EXPECT_EQ(g.last_batch_size, 1u);
  EXPECT_EQ(g.batches_per_rank, 33u);
}

TEST(Geometry, DistributedPaddingAndCutting) {
  Geometry pad = compute_geometry(spec(10, 2, 4));
  EXPECT_EQ(pad.samples_per_rank, 3u);
  EXPECT_EQ(pad.padded_samples, 2u);
  Geometry cut = compute_geometry(spec(10, 2, 4, false, true));
  EXPECT_EQ(cut.samples_per_rank, 2u);
  EXPECT_EQ(cut.sampler_dropped, 2u);
  // Fewer samples than ranks: padding tiles, cutting leaves nothing.
  Geometry tiny = compute_geometry(spec(3, 2, 8));
  EXPECT_EQ(tiny.samples_per_rank, 1u);
  EXPECT_EQ(tiny.padded_samples, 5u);
  Geometry tiny_cut = compute_geometry(spec(3, 2, 8, false, true));
  EXPECT_EQ(tiny_cut.samples_per_rank, 0u);
  EXPECT_EQ(tiny_cut.batches_per_rank, 0u);
  EXPECT_EQ(tiny_cut.sampler_dropped, 3u);
}

TEST(Geometry, EmptyDatasetAndEmptyLoader) {
  Geometry empty = compute_geometry(spec(0, 8));
  EXPECT_EQ(empty.batches_per_rank, 0u);
  EXPECT_EQ(empty.last_batch_size, 0u);
  Geometry dropped = compute_geometry(spec(5, 8, 1, true));
  EXPECT_EQ(dropped.batches_per_rank, 0u);
  EXPECT_EQ(dropped.loader_dropped_per_rank, 5u);
}

TEST(Geometry, AccumulationWindows) {
  Geometry g = compute_geometry(spec(1041, 8, 1, false, false, 4));
  EXPECT_EQ(g.windows, 33u);  // 131 = 32 * 4 + 3
  EXPECT_EQ(g.last_window_batches, 3u);
  Geometry full = compute_geometry(spec(1024, 8, 1, false, false, 4));
  EXPECT_EQ(full.last_window_batches, 4u);
}

TEST(Geometry, HugeSizesAreArithmeticOnly) {
  Geometry g = compute_geometry(spec(1'000'000'000'000'000'000ull, 7, 3));
  EXPECT_EQ(g.samples_per_rank, 333'333'333'333'333'334ull);
  EXPECT_EQ(g.padded_samples, 2u);
  EXPECT_EQ(g.batches_per_rank, 47'619'047'619'047'620ull);
  Geometry max = compute_geometry(spec(UINT64_MAX, 2, 2));
  EXPECT_EQ(max.samples_per_rank, (UINT64_MAX / 2) + 1);
  EXPECT_EQ(max.padded_samples, 1u);
}

TEST(Geometry, RejectsZeroSizes) { EXPECT_THROW(compute_geometry(spec(10, 0)), InternalError); }

TEST(BatchPlan, SequentialIndices) {
  BatchPlan plan(compute_geometry(spec(10, 4)), {});
  EXPECT_EQ(plan.batch_indices(0, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(plan.batch_indices(0, 2), (std::vector<int64_t>{8, 9}));
}

TEST(BatchPlan, DistributedStridesAndPadsFromTheStart) {
  // indices = [0..10) + [0, 1]; rank r takes indices[r::4].
  BatchPlan plan(compute_geometry(spec(10, 2, 4)), {});
  EXPECT_EQ(plan.batch_indices(0, 0), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(plan.batch_indices(0, 1), (std::vector<int64_t>{8}));
  EXPECT_EQ(plan.batch_indices(2, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(plan.batch_indices(3, 1), (std::vector<int64_t>{1}));
  uint64_t rank = 9;
  EXPECT_EQ(plan.padded_sample(0, &rank), 0);
  EXPECT_EQ(rank, 2u);
  EXPECT_EQ(plan.padded_sample(1, &rank), 1);
  EXPECT_EQ(rank, 3u);
}

TEST(BatchPlan, UsesTheGivenOrder) {
  BatchPlan plan(compute_geometry(spec(4, 3)), {3, 1, 0, 2});
  EXPECT_EQ(plan.batch_indices(0, 0), (std::vector<int64_t>{3, 1, 0}));
  EXPECT_EQ(plan.batch_indices(0, 1), (std::vector<int64_t>{2}));
  EXPECT_THROW(BatchPlan(compute_geometry(spec(5, 3)), {0, 1}), InternalError);
}

// Issue 29 (9): sizes from a config or a data file never wrap.
TEST(Geometry, AWorldOfTwoToThe63RanksIsArithmeticOnly) {
  Geometry g = compute_geometry(spec(10, 2, uint64_t{1} << 63));
  EXPECT_EQ(g.samples_per_rank, 1u);
  EXPECT_EQ(g.padded_samples, (uint64_t{1} << 63) - 10);
  EXPECT_EQ(g.batches_per_rank, 1u);
  EXPECT_EQ(g.dropped_total(), 0u);
  EXPECT_EQ(g.delivered_padding(), (uint64_t{1} << 63) - 10);
  BatchPlan plan(g, {});
  uint64_t rank = 0;
  EXPECT_EQ(plan.padded_sample(g.padded_samples - 1, &rank), 7);  // slot 2^63 - 1 is sample (2^63 - 1) mod 10
  EXPECT_EQ(rank, (uint64_t{1} << 63) - 1);
  EXPECT_EQ(plan.batch_indices((uint64_t{1} << 63) - 1, 0), (std::vector<int64_t>{7}));
  Geometry cut = compute_geometry(spec(10, 2, uint64_t{1} << 63, false, true));
  EXPECT_EQ(cut.samples_per_rank, 0u);
  EXPECT_EQ(cut.dropped_total(), 10u);
}

TEST(BatchPlan, PaddingPastTwoToThe64DoesNotWrap) {
  // N = 2^64 - 1, W = 2^63 + 1: the padded list is 2^64 + 2 long; its last slot, N + 2 = 2^64 + 1,
  // goes to rank 2^63 and repeats sample 2 (it wrapped to slot 1: rank 1, sample 1).
  Geometry g = compute_geometry(spec(UINT64_MAX, 2, (uint64_t{1} << 63) + 1));
  ASSERT_EQ(g.padded_samples, 3u);
  BatchPlan plan(g, {});
  uint64_t rank = 0;
  EXPECT_EQ(plan.padded_sample(2, &rank), 2);
  EXPECT_EQ(rank, uint64_t{1} << 63);
}

TEST(Geometry, DatasetSizeForATailSaturatesInsteadOfWrapping) {
  // 2^64 - 2 samples end on a batch of 6 of 8; a tail of 7 needs 2^64 - 1 samples, a tail of 1
  // more than 2^64 (it came out as 1).
  Geometry g = compute_geometry(spec(UINT64_MAX - 1, 8));
  EXPECT_EQ(dataset_size_for_tail(g, 7), UINT64_MAX);
  EXPECT_EQ(dataset_size_for_tail(g, 1), UINT64_MAX);
  EXPECT_EQ(dataset_size_for_tail(compute_geometry(spec(1041, 8)), 4), 1044u);
  EXPECT_EQ(dataset_size_for_tail(compute_geometry(spec(1041, 8)), UINT64_MAX), UINT64_MAX);  // a probe size from a config
}

TEST(BatchPlan, ABatchWhoseIndicesCannotBeAllocatedIsAnInputError) {
#if BATCHCHECK_ASAN
  GTEST_SKIP() << "AddressSanitizer aborts on an allocation this large instead of failing it";
#endif
  // A batch of 2^59 one-byte samples: 512 PiB of data, and first 4 EiB of int64 indices.
  BatchPlan plan(compute_geometry(spec(uint64_t{1} << 59, uint64_t{1} << 59)), {});
  try {
    plan.batch_indices(0, 0);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(format_error(e), "batchcheck: error: loader.batch_size: a batch of 576460752303423488 samples needs 4 EiB for its "
                               "sample indices alone, and allocating them failed: not enough memory (RAM, or the limit of "
                               "ulimit -v) for this batch size");
  }
}
