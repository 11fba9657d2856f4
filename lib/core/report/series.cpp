#include "core/report/series.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace batchcheck {

namespace {

void widen(std::optional<double>& lo, std::optional<double>& hi, const std::optional<double>& vlo,
           const std::optional<double>& vhi) {
  if (vlo) lo = lo ? std::min(*lo, *vlo) : *vlo;
  if (vhi) hi = hi ? std::max(*hi, *vhi) : *vhi;
}

// Six significant digits: a plot needs no more, and the report stays compact.
nlohmann::ordered_json value(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", *v);
  return std::strtod(buf, nullptr);
}

}  // namespace

void Series::reset(std::size_t ranks, uint64_t per_rank, uint64_t max_points) {
  per_rank_ = per_rank;
  max_points = std::max<uint64_t>(max_points, 1);
  bucket_ = per_rank <= max_points ? 1 : (per_rank + max_points - 1) / max_points;
  const uint64_t points = per_rank ? (per_rank + bucket_ - 1) / bucket_ : 0;
  ranks_.assign(ranks, std::vector<Point>(points));
}

void Series::add(uint64_t step, uint64_t batch, uint64_t size, const std::optional<BatchStats>& stats,
                 std::optional<Severity> worst) {
  if (per_rank_ == 0) return;
  const uint64_t r = step / per_rank_, p = step % per_rank_ / bucket_;
  if (r >= ranks_.size() || p >= ranks_[r].size()) return;
  Point& pt = ranks_[r][p];
  pt.batch = std::min(pt.batch, batch);
  ++pt.batches;
  pt.size_min = std::min(pt.size_min, size);
  pt.size_max = std::max(pt.size_max, size);
  if (worst == Severity::Error) ++pt.errors;
  if (worst == Severity::Warning) ++pt.warnings;
  if (!stats) return;
  widen(pt.pred_min, pt.pred_max, stats->pred_min, stats->pred_max);
  widen(pt.loss_min, pt.loss_max, stats->loss, stats->loss);
  pt.nonfinite += stats->pred_nonfinite;
  pt.loss_nonfinite += stats->loss_nonfinite ? 1 : 0;
  if (!band_seen_ && (stats->band_lo || stats->band_hi)) {
    band_seen_ = true;
    band_lo_ = stats->band_lo;
    band_hi_ = stats->band_hi;
  }
}

nlohmann::ordered_json Series::to_json(const std::vector<uint64_t>& rank_ids) const {
  nlohmann::ordered_json out;
  out["bucket"] = bucket_;
  out["band"] = band_seen_ ? nlohmann::ordered_json::array({value(band_lo_), value(band_hi_)}) : nlohmann::ordered_json();
  out["ranks"] = nlohmann::ordered_json::array();
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    using J = nlohmann::ordered_json;
    J batch = J::array(), batches = J::array(), size_min = J::array(), size_max = J::array(), pred_min = J::array(),
      pred_max = J::array(), nonfinite = J::array(), loss_min = J::array(), loss_max = J::array(),
      loss_nonfinite = J::array(), errors = J::array(), warnings = J::array();
    for (const Point& pt : ranks_[r]) {
      if (pt.batches == 0) continue;  // not checked (interrupted, --edges, max_batches)
      batch.push_back(pt.batch);
      batches.push_back(pt.batches);
      size_min.push_back(pt.size_min);
      size_max.push_back(pt.size_max);
      pred_min.push_back(value(pt.pred_min));
      pred_max.push_back(value(pt.pred_max));
      nonfinite.push_back(pt.nonfinite);
      loss_min.push_back(value(pt.loss_min));
      loss_max.push_back(value(pt.loss_max));
      loss_nonfinite.push_back(pt.loss_nonfinite);
      errors.push_back(pt.errors);
      warnings.push_back(pt.warnings);
    }
    out["ranks"].push_back({{"rank", r < rank_ids.size() ? rank_ids[r] : r},
                            {"batch", batch},
                            {"batches", batches},
                            {"size_min", size_min},
                            {"size_max", size_max},
                            {"pred_min", pred_min},
                            {"pred_max", pred_max},
                            {"nonfinite", nonfinite},
                            {"loss_min", loss_min},
                            {"loss_max", loss_max},
                            {"loss_nonfinite", loss_nonfinite},
                            {"errors", errors},
                            {"warnings", warnings}});
  }
  return out;
}

}  // namespace batchcheck
