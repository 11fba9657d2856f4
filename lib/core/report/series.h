#pragma once
// Per-batch statistics for the report's plots (`series` in the report): each batch's size,
// the prediction's finite range and non-finite count, the loss, and how bad its findings
// were, as columnar arrays per rank. A long scan is summarized in buckets of consecutive
// batches (min/max envelopes, sums), at most kMaxPoints per rank, so a million-batch report
// stays small; the buckets fill in any order, so a resumed or reordered replay adds up the same.
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/report/report.h"

namespace batchcheck {

// What one batch's post-forward stage saw (absent parts: not computed for this batch).
struct BatchStats {
  std::optional<double> pred_min, pred_max;  // the prediction's finite values
  uint64_t pred_nonfinite = 0;               // NaN and Inf elements of the prediction
  std::optional<double> loss;                // the loss, when computed and finite
  bool loss_nonfinite = false;
  std::optional<double> band_lo, band_hi;  // the loss contract's bounds on the prediction
};

class Series {
 public:
  static constexpr uint64_t kMaxPoints = 1000;

  // `ranks` checked, `per_rank` steps each (replay step s is rank s / per_rank).
  void reset(std::size_t ranks, uint64_t per_rank, uint64_t max_points = kMaxPoints);
  // A replay step that ended: `batch` its index in the rank, `worst` its findings' worst
  // severity (none: it passed).
  void add(uint64_t step, uint64_t batch, uint64_t size, const std::optional<BatchStats>& stats,
           std::optional<Severity> worst);
  // {"bucket", "band", "ranks": [{"rank", "batch", "batches", "size_min", ...}]}
  nlohmann::ordered_json to_json(const std::vector<uint64_t>& rank_ids) const;
  uint64_t bucket() const { return bucket_; }

 private:
  struct Point {
    uint64_t batch = UINT64_MAX, batches = 0, size_min = UINT64_MAX, size_max = 0;
    std::optional<double> pred_min, pred_max, loss_min, loss_max;
    uint64_t nonfinite = 0, loss_nonfinite = 0, errors = 0, warnings = 0;
  };
  uint64_t per_rank_ = 0, bucket_ = 1;
  std::vector<std::vector<Point>> ranks_;
  std::optional<double> band_lo_, band_hi_;
  bool band_seen_ = false;
};

}  // namespace batchcheck
