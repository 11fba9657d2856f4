#pragma once
// The load stage's findings, at the batch where PyTorch raises: samples the dataset cannot
// load (an image file PIL cannot decode), or samples the DataLoader's collate_fn cannot put
// together (default_collate on samples of unequal shape). Pure: unit-tested on fixed failures.
#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/pipeline/value_findings.h"

namespace batchcheck {

Emitted collate_finding(const CollateFailure& failure);
Emitted unreadable_finding(const std::vector<UnreadableSample>& samples);

}  // namespace batchcheck
