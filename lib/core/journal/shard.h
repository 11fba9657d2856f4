#pragma once
// Scans split across machines through the launchers people already use (torchrun, SLURM
// arrays, Kubernetes Indexed Jobs): `scan --shard K/N` replays every N-th step of the batch
// plan starting at K and writes a partial report (the committed journal of its steps);
// `merge` checks the parts belong together and cover every step once, and replays their
// journals, in step order, into the report an unsharded scan writes.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/journal/step_log.h"
#include "core/scan/scan.h"
#include "core/scan/scan_events.h"

namespace batchcheck {

class Aggregator;

// A partial report's format: 2 has clean steps as rows ("clean"); 1 (every step as journal
// lines) is still read.
constexpr int kPartialVersion = 2;

using EnvFn = std::function<const char*(const char*)>;

// --shard's value: "K/N"; "env" (torchrun's RANK and WORLD_SIZE, or a SLURM array's task id
// mapped through SLURM_ARRAY_TASK_MIN/_STEP onto 0..SLURM_ARRAY_TASK_COUNT-1); "env/N" (also
// JOB_COMPLETION_INDEX, which comes without a count). Throws InputError("", "--shard", ...).
Shard resolve_shard(const std::string& value, const EnvFn& env);

// "{shard}" in an output path becomes the shard's index (every launcher process gets the
// same arguments). Throws InputError when a launcher's shard would overwrite another's.
std::string shard_output_path(const std::string& path, const Shard& shard);

// What the parts must share: the config file's bytes (`config_text`), the model file's, and the
// data files' sizes with their first and last MiB (FNV-1a, hex); paths may differ between machines.
nlohmann::ordered_json scan_identity(const std::string& config_text, const std::vector<std::string>& model_files,
                                     const std::vector<std::string>& data_files);

// The partial report of a shard's scan: the setup's identity, the config as written, the
// scan's start, the committed journal lines of the steps with findings (and of the two whose
// shapes the report shows), the other steps as compact rows (core/journal/clean_rows.h), its notes
// and how it ended.
nlohmann::ordered_json make_partial(const Config& cfg, const Shard& shard, const nlohmann::ordered_json& start,
                                    const StepLog& log, const std::vector<std::string>& notes, const ScanEnd& end);

// One step's committed journal lines (or, from a part in memory, the step kept compact), and
// the part they come from (for the error).
struct StepLines {
  const nlohmann::ordered_json* lines = nullptr;
  const std::string* from = nullptr;
  const CleanStep* clean = nullptr;
};
using JoinedSteps = std::vector<std::pair<uint64_t, StepLines>>;
// The report one process would have built: `start`, then every step's lines (`steps` sorted
// by step, each once), the parts' notes and how they ended, told to `agg`. Throws
// InputError(from, "steps", ...) at a malformed line.
ScanResult join_steps(Aggregator& agg, const nlohmann::ordered_json& start, const std::string& start_from,
                      const JoinedSteps& steps, const std::vector<std::string>& notes, const ScanEnd& end);

}  // namespace batchcheck
