#pragma once
// A batch that ran in half precision (config precision fp16/bf16), as findings: half-overflow
// where an op's half output went non-finite while the same op's float32 value is finite, and
// half-headroom where an op's largest value reached the warned share of float16's range.
// Pure: the backend's HalfCheck in, findings out.
#include <cstdint>
#include <vector>

#include "core/pipeline/backend.h"
#include "core/pipeline/value_findings.h"

namespace batchcheck {

// `headroom`: checks.half_headroom, the share of 65,504 that warns.
std::vector<Emitted> half_findings(const HalfCheck& h, uint64_t batch_size, double headroom);

// The loss PyTorch refuses under CUDA's autocast (binary_cross_entropy, BCELoss), for a scan
// in half precision of a config whose loss is "bce"; nullopt otherwise.
std::optional<Emitted> bce_autocast_finding(const Config& cfg, uint64_t batch_size);

}  // namespace batchcheck
