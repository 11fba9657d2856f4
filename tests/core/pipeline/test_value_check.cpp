#include <gtest/gtest.h>

#include <cmath>

#include "core/pipeline/value_check.h"

using namespace batchcheck;

TEST(ValueCheck, CleanDataTakesTheFastPath) {
  std::vector<float> v = {0.0f, 0.5f, 1.0f, 0.25f};
  ValueRule r;
  r.lo = 0.0;
  r.hi = 1.0;
  ValueStats s = check_values(v.data(), 2, 2, r);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.min, 0.0);
  EXPECT_EQ(s.max, 1.0);
  EXPECT_TRUE(s.bad_rows.empty());
}

TEST(ValueCheck, NanInfAndRangeAreCountedPerRow) {
  std::vector<float> v = {0.5f, NAN, 0.1f, 0.2f, 1.5f, -INFINITY, 0.3f, 0.4f};
  ValueRule r;
  r.lo = 0.0;
  r.hi = 1.0;
  ValueStats s = check_values(v.data(), 4, 2, r);
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 1u);
  EXPECT_EQ(s.above, 1u);
  EXPECT_EQ(s.below, 0u);
  EXPECT_EQ(s.bad_rows, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(s.bad_rows_total, 2u);
  EXPECT_EQ(s.bad_values, std::vector<double>{1.5});
  EXPECT_EQ(s.min, 0.1f);
  EXPECT_EQ(s.max, 1.5f);
}

TEST(ValueCheck, InfinityAloneIsNonFinite) {
  std::vector<double> v = {1.0, INFINITY};
  ValueStats s = check_values(v.data(), 2, 1, ValueRule{});
  EXPECT_EQ(s.inf, 1u);
  EXPECT_EQ(s.bad_rows, std::vector<uint64_t>{1});
  EXPECT_EQ(s.max, 1.0);
}

TEST(ValueCheck, NonFiniteIgnoredWhenNotAsked) {
  std::vector<float> v = {NAN, 2.0f};
  ValueRule r;
  r.finite = false;
  r.hi = 1.0;
  ValueStats s = check_values(v.data(), 2, 1, r);
  EXPECT_EQ(s.nan, 0u);
  EXPECT_EQ(s.above, 1u);
  EXPECT_EQ(s.bad_rows, std::vector<uint64_t>{1});
}

TEST(ValueCheck, ClassIndicesWithIgnoreIndex) {
  std::vector<int64_t> v = {0, 9, 255, -100, -1, 3};
  ValueRule r;
  r.class_index = true;
  r.classes = 10;
  r.ignore_index = -100;
  ValueStats s = check_values(v.data(), 6, 1, r);
  EXPECT_EQ(s.above, 1u);
  EXPECT_EQ(s.below, 1u);
  EXPECT_EQ(s.ignored, 1u);
  EXPECT_EQ(s.bad_rows, (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(s.bad_values, (std::vector<double>{255, -1}));
  r.ignore_index = 255;
  EXPECT_EQ(check_values(v.data(), 6, 1, r).bad_rows, (std::vector<uint64_t>{3, 4}));
}

// A mask a region loss ignores in places (smp's ignore_index=255 in binary mode), and class
// indices held as floats (MONAI's one_hot takes them).
TEST(ValueCheck, IgnoredMaskValuesAndFloatClassIndices) {
  std::vector<float> mask = {0, 1, 255, 0.5f, 2};
  ValueRule r;
  r.lo = 0.0;
  r.hi = 1.0;
  r.ignore_index = 255;
  ValueStats s = check_values(mask.data(), 5, 1, r);
  EXPECT_EQ(s.ignored, 1u);
  EXPECT_EQ(s.above, 1u);
  EXPECT_EQ(s.bad_rows, std::vector<uint64_t>{4});
  std::vector<double> idx = {0, 3, 4, 255};
  ValueRule c;
  c.class_index = true;
  c.classes = 4;
  c.lo = 0.0;
  c.hi = 3.0;
  ValueStats cs = check_values(idx.data(), 4, 1, c);
  EXPECT_EQ(cs.above, 2u);
  EXPECT_EQ(cs.bad_values, (std::vector<double>{4, 255}));
}

TEST(ValueCheck, EmptyTensor) {
  ValueStats s = check_values(static_cast<const float*>(nullptr), 0, 0, ValueRule{});
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(std::isnan(s.min));
}

// Long enough for the vectorized pass (8 lanes) and its scalar tail: every position of
// a violation inside a lane, and in the tail, must be found.
TEST(ValueCheck, VectorizedPassMatchesAtEveryLanePosition) {
  for (std::size_t n : {7u, 8u, 9u, 64u, 1001u}) {
    for (std::size_t pos = 0; pos < n; pos += (n > 64 ? 97 : 1)) {
      for (float bad : {NAN, INFINITY, -INFINITY, 1.5f, -0.5f}) {
        std::vector<float> v(n, 0.5f);
        v[pos] = bad;
        ValueRule r;
        r.lo = 0.0;
        r.hi = 1.0;
        ValueStats s = check_values(v.data(), n, 1, r);
        ASSERT_EQ(s.violations(), 1u) << "n=" << n << " pos=" << pos << " value=" << bad;
        ASSERT_EQ(s.bad_rows, std::vector<uint64_t>{pos});
        ASSERT_EQ(s.min, std::isfinite(bad) ? std::min(0.5, static_cast<double>(bad)) : 0.5);
        // Without bounds, only NaN/Inf are violations.
        ValueStats f = check_values(v.data(), n, 1, ValueRule{});
        ASSERT_EQ(f.violations(), std::isfinite(bad) ? 0u : 1u) << "n=" << n << " pos=" << pos;
        ASSERT_EQ(f.max, std::isfinite(bad) ? std::max(0.5, static_cast<double>(bad)) : 0.5);
      }
    }
  }
}

TEST(ValueCheck, SamplesOfAListJoinAsRowsOfOneBatch) {
  const float a[] = {1.0f, 2.0f}, b[] = {NAN, 5.0f, -1.0f}, c[] = {0.5f};
  ValueRule rule;
  rule.lo = 0.0;
  ValueStats batch;
  add_sample(batch, check_values(a, 1, 2, rule), 0);
  add_sample(batch, check_values(b, 1, 3, rule), 1);
  add_sample(batch, check_values(c, 1, 1, rule), 2);
  EXPECT_EQ(batch.elements, 6u);
  EXPECT_EQ(batch.nan, 1u);
  EXPECT_EQ(batch.below, 1u);
  EXPECT_EQ(batch.min, -1.0);
  EXPECT_EQ(batch.max, 5.0);
  EXPECT_EQ(batch.bad_rows, (std::vector<uint64_t>{1}));
  EXPECT_EQ(batch.bad_rows_total, 1u);
  EXPECT_EQ(batch.bad_values, (std::vector<double>{-1.0}));
}
