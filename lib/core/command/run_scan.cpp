#include "core/command/run_scan.h"

#include "core/journal/aggregate.h"
#include "core/scan/replay.h"

namespace batchcheck {

// In one process: the replay tells the aggregator directly.
ScanResult run_scan(const Config& cfg, const ScanSettings& settings, Backend& backend, const OrderFn& order,
                    std::ostream& log) {
  Aggregator agg(cfg, settings, log);
  replay(cfg, settings, backend, order, agg);
  return agg.result(agg.end_state());
}

}  // namespace batchcheck
