#pragma once
// The loss contract of SPEC.md: what predictions and targets must look like for each
// loss type. Structural problems (batch dimension, shapes, dtypes) are decided from
// shapes alone; value problems become ValueRules the backend evaluates.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/pipeline/backend.h"

namespace batchcheck {

struct ContractIssue {
  std::string id;  // batch-dim-mismatch, shape-mismatch, target-dtype
  std::string message;
  nlohmann::ordered_json evidence = nlohmann::ordered_json::object();
};

struct ContractPlan {
  std::vector<ContractIssue> issues;
  std::optional<ValueRule> output_rule;
  std::optional<ValueRule> target_rule;
  bool class_targets = false;  // targets are class indices (cross_entropy/nll)
  bool can_compute_loss = false;  // no structural issue and the loss type has a loss
  // The prediction's rows are the batch's samples. When not (batch-dim-mismatch), a value
  // finding concerns the whole batch: a row number of the output names no sample.
  bool output_rows_are_samples = true;
};

ContractPlan plan_contract(const LossConfig& loss, const ChecksConfig& checks, uint64_t batch_size,
                           const TensorMeta& output, const TensorMeta& target);

// The region losses' part of plan_contract (region_contract.cpp): their targets' shapes and
// values, given a prediction of (N, C, ...).
void plan_region_contract(const LossConfig& loss, const ChecksConfig& checks, const TensorMeta& output,
                          const TensorMeta& target, ContractPlan& plan);

// The rule for inputs: floating inputs must be finite.
std::optional<ValueRule> input_rule(const TensorMeta& input);

// "[8, 1, 64, 64]"
std::string shape_text(const std::vector<int64_t>& shape);
// "torch.Size([8, 1])", as PyTorch prints it in its own errors.
std::string torch_size_text(const std::vector<int64_t>& shape);

}  // namespace batchcheck
