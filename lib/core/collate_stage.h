#pragma once
// The collate stage's finding: a batch whose samples the DataLoader's collate_fn cannot put
// together (default_collate on samples of unequal shape), at the batch where PyTorch raises.
// Pure: unit-tested on fixed failures.
#include "core/backend.h"
#include "core/config.h"
#include "core/value_findings.h"

namespace batchcheck {

Emitted collate_finding(const CollateFailure& failure);

}  // namespace batchcheck
