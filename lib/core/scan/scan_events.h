#pragma once
// What a replay tells whoever builds the report: the scan's start, each step (a batch of a
// rank, or a probe) as it begins and ends, the findings recorded in it, and the end. In
// one process the Aggregator receives these calls directly; under the supervisor they
// cross a pipe as JSON lines (core/journal/journal.h), so a replay that dies loses nothing that
// was already found.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/pipeline/backend.h"
#include "core/report/report.h"
#include "core/report/series.h"

namespace batchcheck {

struct BatchShapes {
  uint64_t index = 0, size = 0;
  TensorMeta input, output, target;
};

// A step: replay steps are numbered 0..replay_steps-1 in (rank, batch) order, probes follow.
struct StepInfo {
  uint64_t step = 0;
  std::optional<uint64_t> rank, batch;
  bool probe = false;
  uint64_t size = 0;
};

struct ScanStart {
  DatasetInfo data;
  ModelInfo model;
  std::string device;
  std::string device_note;  // why "cuda" is this GPU (a launcher's local rank), or ""
  std::string libtorch;
  bool backward = false;
  std::vector<uint64_t> ranks;
  uint64_t replay_steps = 0;
  // The geometry findings: their samples depend on the sampler order, known only where the
  // batches are made.
  std::vector<Finding> geometry;
};

struct RecordEvent {
  StepInfo at;
  std::string id, stage, message;
  nlohmann::ordered_json evidence;
  std::vector<int64_t> samples;  // dataset indices, distinct, at most kSampleCap
  uint64_t count = 0;            // samples concerned
  std::string cuda;
  // The step's batch indices, for the finding's fixes (the reproduce snippet): sent with
  // the first record of each (id, rank, probe size), empty afterwards.
  std::vector<int64_t> batch_indices;
};

struct StepEnd {
  uint64_t step = 0;
  bool forward_ok = false;
  uint64_t size = 0;
  std::optional<BatchShapes> shapes;  // replay steps of the first rank: the report's first/last batch
  std::optional<BatchStats> stats;    // the post-forward stage's, for the report's plots
};

// Where the bad values of a step came from (core/findings/root_cause.h), told after the step ended:
// the ids it explains and the report's root_cause (null when nothing was localized).
struct CauseEvent {
  StepInfo at;
  std::vector<std::string> ids;
  nlohmann::ordered_json root_cause;
};

struct ScanEnd {
  bool complete = true;
  bool device_lost = false;       // a CUDA device-side assert stopped the scan
  bool stopped_at_error = false;  // --fail-fast stopped it at the first failing finding
};

class ScanSink {
 public:
  virtual ~ScanSink() = default;
  virtual void start(const ScanStart& s) = 0;
  // `indices`: the step's dataset indices (a crash or a timeout in the step is reported on them).
  virtual void begin(const StepInfo& s, const std::vector<int64_t>& indices) = 0;
  virtual void record(RecordEvent&& r) = 0;
  virtual void end(const StepEnd& e) = 0;
  // Localizing a step's bad value (after the step ended): its start, then its result. A
  // process that dies in between died in the localizer, not in the batch.
  virtual void localizing(const StepInfo& /*s*/) {}
  virtual void cause(CauseEvent&& /*c*/) {}
  // The replay goes on as job 0 of `jobs`: steps from `from` on are every `jobs`-th (ScanSettings::split).
  virtual void split(uint64_t /*jobs*/, uint64_t /*from*/) {}
  virtual void finish(const ScanEnd& e) = 0;
};

}  // namespace batchcheck
