#pragma once
// The stage after a successful forward: the prediction's and target's value checks against
// the loss contract, each extra output's (loss.aux), then the loss; and what it saw for the
// report's plots. Pure over a BatchView, so it may run on the worker thread while the next
// batch's forward runs.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/pipeline/contract.h"
#include "core/pipeline/value_findings.h"
#include "core/report/series.h"

namespace batchcheck {

// An extra output's contract, decided on the main thread like the prediction's.
struct AuxPlan {
  TensorMeta meta;
  ContractPlan plan;
};

struct PostInput {
  ContractPlan plan;
  std::vector<AuxPlan> aux;  // parallel to LossConfig::aux
  TensorMeta output, target;
  uint64_t batch_size = 0;
  bool prior_error = false;  // an earlier stage found something: the loss is not computed
};

struct PostResult {
  std::vector<Emitted> emitted;
  BatchStats stats;
};

PostResult post_stage(const LossConfig& loss, const PostInput& in, BatchView& view);

// The value findings of one tensor: `stats` when already computed, else the view checks it.
ValueStats check_values(const LossConfig& loss, uint64_t batch_size, Slot slot, const ValueRule& rule, const TensorMeta& meta,
                        BatchView& view, std::vector<Emitted>& out, const ValueStats* stats = nullptr,
                        bool rows_are_samples = true, const std::vector<uint64_t>* row_samples = nullptr);

// Findings of one of several input fields, or of an extra output, carry its name ("field"
// or "output"): the ids are those of the one input or the prediction.
void name_part(std::vector<Emitted>& emitted, const char* part, const std::string& key);

}  // namespace batchcheck
