#pragma once
// A whole scan in one process: the replay tells an Aggregator directly (the in-process path
// of the tests and of the engine's direct scan; the supervised path joins them by journal).
#include <ostream>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/scan/scan.h"

namespace batchcheck {

ScanResult run_scan(const Config& cfg, const ScanSettings& settings, Backend& backend, const OrderFn& order,
                    std::ostream& log);

}  // namespace batchcheck
