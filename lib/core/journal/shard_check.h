#pragma once
// merge believes nothing a part says about the scan's plan (issue 29, item 8): a part comes from
// another machine or an editor, and the merged report's size (its ranks, steps and plots), its
// suggestions and every allocation merge makes follow from these claims. The plan is recomputed
// from the part's own config text, as core/scan/replay.cpp makes it, and every claim (the samples,
// ranks, replay steps, each step's rank, batch and size, the probes, every count) is checked
// against it and against the first part before any of the part's journal is replayed. Each
// refusal is InputError(part, field, "...: the part was edited").
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/journal/step_log.h"
#include "core/plan/geometry.h"
#include "core/scan/scan_events.h"

namespace batchcheck {

// A count in a part: a JSON non-negative integer. nlohmann's get<uint64_t> makes 2^64-5 of -5
// and 2 of 2.5, so the type is checked first. Throws InputError(file, where, ...).
uint64_t part_count(const nlohmann::ordered_json& j, const std::string& file, const std::string& where);

// A part's `config`: the config as written and the scan's settings beside it, their types checked.
struct PartConfig {
  std::string file, dir, text;
  Mode mode = Mode::Train;
  Precision precision = Precision::Fp32;  // --precision as the part ran (absent in older parts: fp32)
  double half_headroom = 0.5;
  bool edges = false;
  uint64_t max_batches = 0;
};
PartConfig part_config(const nlohmann::ordered_json& config, const std::string& file);
// Throws InputError(file, "config.<key>", ...) unless `part` is the config and the settings that
// `reference` (from `reference_file`) was scanned with.
void check_same_config(const PartConfig& part, const std::string& file, const PartConfig& reference,
                       const std::string& reference_file);

// The steps a part's scan replayed: each rank's batches (all, max_batches' first or --edges'),
// then the probes, with the size of each, from the config and the part's own sample count.
class PartPlan {
 public:
  // `cfg`: parsed from the part's config text, with its max_batches; `start`: the part's start
  // line. Checks its samples, ranks, replay steps and geometry findings against the plan they make.
  PartPlan(const Config& cfg, bool edges, const nlohmann::ordered_json& start, const std::string& file);

  uint64_t samples() const { return samples_; }
  uint64_t replay_steps() const { return replay_steps_; }

  // Another part's start, its config and settings this one's (check_same_config): its samples,
  // ranks and replay steps must be this plan's. The same config text over the same samples makes
  // the same plan, so its steps are checked against this one; the rest of its start is never
  // replayed (merge tells the first part's).
  void check_other(const nlohmann::ordered_json& start, const std::string& file,
                   const std::string& reference_file) const;
  // An entry of the part's `steps` (`where`: "steps[3]"), {"step": S, "lines": [...]}: S one of
  // the plan's, its committed journal lines [begin] record... end cause..., each naming this step
  // as the plan has it, every count a count. Returns S.
  uint64_t check_entry(const nlohmann::ordered_json& entry, const std::string& file, const std::string& where) const;
  // A compact row, `number` counted from 1 as in core/journal/clean_rows.h's errors.
  void check_row(const CleanStep& row, std::size_t number, const std::string& file) const;

 private:
  std::optional<StepInfo> planned(uint64_t step) const;
  void check_lines(uint64_t step, const nlohmann::ordered_json& lines, const std::string& file,
                   const std::string& where) const;
  uint64_t batch_size(uint64_t rank, uint64_t batch) const;
  std::string plan_text() const;
  std::vector<uint64_t> read_ranks(const nlohmann::ordered_json& start, const std::string& file) const;
  void check_at(const nlohmann::ordered_json& at, uint64_t step, const std::string& file,
                const std::string& where) const;
  void check_sample(const nlohmann::ordered_json& j, const std::string& file, const std::string& where) const;
  void check_samples(const nlohmann::ordered_json& j, const std::string& file, const std::string& where) const;
  void check_finding(const nlohmann::ordered_json& f, const std::string& file, const std::string& where) const;

  Geometry g_;
  uint64_t samples_ = 0, world_size_ = 1, per_rank_ = 0, replay_steps_ = 0;
  bool edges_ = false;
  std::vector<uint64_t> ranks_;   // as the part says, checked: all of the world, or --rank's one
  std::vector<uint64_t> probes_;  // checks.probe_batch_sizes: step replay_steps + i has probes_[i]
};

}  // namespace batchcheck
