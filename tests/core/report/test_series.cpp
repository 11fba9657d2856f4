// The report's per-batch series: one point per batch while short, min/max envelopes and sums
// per bucket when long, the same whatever order the steps end in.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/report/series.h"

using namespace batchcheck;
using Json = nlohmann::ordered_json;

namespace {

BatchStats stats(double lo, double hi, double loss, uint64_t nonfinite = 0) {
  BatchStats s;
  s.pred_min = lo;
  s.pred_max = hi;
  s.loss = loss;
  s.pred_nonfinite = nonfinite;
  s.band_lo = 0;
  s.band_hi = 1;
  return s;
}

}  // namespace

TEST(Series, OnePointPerBatchWhileShort) {
  Series s;
  s.reset(1, 3);
  s.add(0, 0, 8, stats(0.1, 0.9, 0.5), std::nullopt);
  s.add(1, 1, 8, stats(0.2, 0.8, 0.25), Severity::Warning);
  BatchStats nan;  // a prediction with no finite value, no loss
  nan.pred_nonfinite = 4096;
  s.add(2, 2, 1, nan, Severity::Error);
  const Json j = s.to_json({0});
  EXPECT_EQ(j["bucket"], 1);
  EXPECT_EQ(j["band"], Json::parse("[0.0, 1.0]"));
  const Json& r = j["ranks"][0];
  EXPECT_EQ(r["batch"], Json::parse("[0, 1, 2]"));
  EXPECT_EQ(r["size_max"], Json::parse("[8, 8, 1]"));
  EXPECT_EQ(r["pred_min"], Json::parse("[0.1, 0.2, null]"));
  EXPECT_EQ(r["nonfinite"], Json::parse("[0, 0, 4096]"));
  EXPECT_EQ(r["loss_max"], Json::parse("[0.5, 0.25, null]"));
  EXPECT_EQ(r["errors"], Json::parse("[0, 0, 1]"));
  EXPECT_EQ(r["warnings"], Json::parse("[0, 1, 0]"));
}

TEST(Series, LongScansAreBucketedWithEnvelopesInAnyOrder) {
  // 2 ranks of 10,001 batches at 1,000 points: buckets of 11 batches, 910 points per rank.
  const uint64_t per_rank = 10001;
  std::vector<uint64_t> steps(2 * per_rank);
  std::iota(steps.begin(), steps.end(), 0);
  auto fill = [&](Series& s) {
    s.reset(2, per_rank);
    for (uint64_t step : steps) {
      const uint64_t b = step % per_rank;
      const double x = static_cast<double>(b);
      s.add(step, b, b == per_rank - 1 ? 3 : 16, stats(-x, x, x / 2, b == 5000 ? 7 : 0),
            b == 12 ? std::optional<Severity>(Severity::Error) : std::nullopt);
    }
  };
  Series ordered, shuffled;
  fill(ordered);
  std::shuffle(steps.begin(), steps.end(), std::mt19937(7));
  fill(shuffled);
  const Json j = ordered.to_json({0, 1});
  EXPECT_EQ(j, shuffled.to_json({0, 1}));
  EXPECT_EQ(j["bucket"], 11);
  const Json& r = j["ranks"][1];
  EXPECT_EQ(r["rank"], 1);
  ASSERT_EQ(r["batch"].size(), 910u);
  EXPECT_EQ(r["batch"][1], 11);
  EXPECT_EQ(r["batches"][1], 11);
  EXPECT_EQ(r["batches"][909], 10001 - 909 * 11);  // the last bucket holds the rest
  EXPECT_EQ(r["pred_min"][1], -21.0);
  EXPECT_EQ(r["pred_max"][1], 21.0);
  EXPECT_EQ(r["loss_min"][1], 5.5);
  EXPECT_EQ(r["errors"][1], 1);        // batch 12
  EXPECT_EQ(r["nonfinite"][5000 / 11], 7);
  EXPECT_EQ(r["size_min"][909], 3);    // the tail batch stays visible in its bucket
  EXPECT_EQ(r["size_max"][909], 16);
}

TEST(Series, BatchesNotCheckedLeaveNoPoint) {
  // --edges: two steps per rank, batches 0 and 9; an interrupted scan: rank 1 never ran.
  Series s;
  s.reset(2, 2);
  s.add(0, 0, 4, std::nullopt, std::nullopt);
  s.add(1, 9, 2, std::nullopt, Severity::Error);
  const Json j = s.to_json({0, 1});
  EXPECT_TRUE(j["band"].is_null());
  EXPECT_EQ(j["ranks"][0]["batch"], Json::parse("[0, 9]"));
  EXPECT_EQ(j["ranks"][0]["pred_min"], Json::parse("[null, null]"));
  EXPECT_EQ(j["ranks"][1]["batch"], Json::array());
}
