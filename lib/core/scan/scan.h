#pragma once
// What a scan runs with and gives back: its settings (gate, edges, rank, shard) and its result
// (the report, the findings, the verdict). The replay (core/scan/replay.h) takes the one, the
// aggregator (core/journal/aggregate.h) builds the other.
#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/plan/geometry.h"
#include "core/report/report.h"

namespace batchcheck {

// One part of a scan split across processes (core/journal/shard.h): replay steps are dealt
// round-robin, balanced over ranks and batches alike; the probes run in shard 0.
// `--jobs` splits one machine's scan the same way, possibly after job 0 ran the steps below
// `from` alone (a measured split, app's supervisor).
struct Shard {
  uint64_t index = 0, count = 1;
  std::string source;  // where it came from, for messages: "--shard", "torchrun (RANK, WORLD_SIZE)", ...
  uint64_t from = 0;   // steps below it are shard 0's
  bool has_step(uint64_t step) const { return step < from ? index == 0 : step % count == index; }
  // How many of the steps 0..total-1 are this shard's.
  uint64_t steps_in(uint64_t total) const {
    const uint64_t first = from + (index + count - from % count) % count;  // the first at or past `from`
    return (index == 0 ? std::min(from, total) : 0) + (first < total ? (total - first + count - 1) / count : 0);
  }
  bool job() const { return source == kJobsSource; }  // merged in memory: no partial report
  static constexpr const char* kJobsSource = "--jobs";
};

struct ScanSettings {
  FailOn fail_on = FailOn::Error;
  bool edges = false;            // only the first and last batch of each rank, plus probes
  // The probes, then every rank's first and last batch, then the rest; stop at the first
  // finding that fails the gate (--fail-fast).
  bool fail_fast = false;
  std::optional<uint64_t> rank;  // only this rank
  bool quiet = false;            // -q: no summary, no progress line (the log is its own: core/base/log.h)
  bool progress = false;         // draw a progress line (stderr is a terminal)
  std::string libtorch_version;
  // Set asynchronously (by a signal handler): stop after the current batch.
  const std::atomic<int>* stop = nullptr;
  // Set asynchronously: the undecided --jobs default's first job goes on as job 0 of this many
  // from its next step (rounded up to a multiple), telling its sink where (ScanSink::split).
  const std::atomic<int>* split = nullptr;
  std::optional<Shard> shard;  // only these replay steps; the report is a partial one
};

struct ScanResult {
  nlohmann::ordered_json report;
  std::vector<Finding> findings;
  bool failed = false;
  bool complete = true;
  uint64_t batches_checked = 0;
  // A shard's scan: the partial report `merge` takes (core/journal/shard.h), written instead.
  nlohmann::ordered_json partial;
};

// Produces the sampler order for a loader spec (engine/data/permutation.h in production).
using OrderFn = std::function<std::vector<int64_t>(const LoaderSpec&)>;

}  // namespace batchcheck
