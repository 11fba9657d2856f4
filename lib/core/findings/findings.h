#pragma once
// Finding ids and the fixes they carry. The geometry findings are computed here from
// the batch plan alone; the scan engine reuses the fix builders with the real geometry.
#include <cstdint>
#include <vector>

#include "core/config/config.h"
#include "core/plan/geometry.h"
#include "core/report/report.h"

namespace batchcheck {

// At most this many sample indices are listed per finding; `count` has the total.
constexpr std::size_t kSampleCap = 32;

Fix fix_drop_last(const Geometry& g);
Fix fix_batch_size_divisor(const Geometry& g);
Fix fix_pad_collate(const Geometry& g, LossType loss);

// tail-batch-partial, tail-batch-singleton, empty-loader, samples-dropped,
// sampler-padding, accumulation-partial-window: one finding per id, covering `ranks`.
std::vector<Finding> geometry_findings(const BatchPlan& plan, const std::vector<uint64_t>& ranks, LossType loss);

}  // namespace batchcheck
