#pragma once
// The committed steps of one part of a scan (a --jobs job, a --shard), for joining the parts
// in step order (core/journal/shard.h): the journal lines of steps with findings, and the steps without
// findings kept compact (their plot statistics; the batch shapes only on the part's lowest and
// highest step, all the report takes from them), so that a part of 10^6 steps stays small.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/scan/scan_events.h"

namespace batchcheck {

struct CleanStep {
  StepInfo at;
  bool forward_ok = false;
  std::optional<BatchStats> stats;
  std::unique_ptr<BatchShapes> shapes;
  StepEnd end() const;
};

class StepLog {
 public:
  // A step that ended without findings.
  void clean(const StepInfo& at, const StepEnd& e);
  // The step's journal lines, to append to (a clean step becomes lines first).
  nlohmann::ordered_json& lines(uint64_t step);
  const std::map<uint64_t, CleanStep>& cleans() const { return clean_; }
  const std::map<uint64_t, nlohmann::ordered_json>& lines() const { return lines_; }

 private:
  std::map<uint64_t, CleanStep> clean_;
  std::map<uint64_t, nlohmann::ordered_json> lines_;
  std::optional<uint64_t> shaped_lo_, shaped_hi_;  // the clean steps that keep their shapes
};

// A clean step as journal lines: begin (without indices) and end.
nlohmann::ordered_json clean_step_lines(const CleanStep& c);

}  // namespace batchcheck
