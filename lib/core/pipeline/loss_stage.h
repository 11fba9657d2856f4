#pragma once
// The loss and backward stages' findings, from what the backend computed: a loss that raised
// or is not finite; a backward that raised or left parameters with non-finite gradients.
// Pure: unit-tested on fixed results.
#include <cstdint>
#include <optional>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/pipeline/value_check.h"
#include "core/pipeline/value_findings.h"

namespace batchcheck {

// `target_stats`: the target's value check when the loss takes class indices (to say that a
// mean over only ignore_index targets is 0/0); nullptr otherwise.
std::optional<Emitted> loss_finding(const LossResult& loss, const LossConfig& cfg, uint64_t batch_size,
                                    const ValueStats* class_target_stats);

// id "cuda-device-assert" means the device is lost: nothing after it can run.
std::optional<Emitted> backward_finding(const BackwardResult& b, uint64_t batch_size);

}  // namespace batchcheck
