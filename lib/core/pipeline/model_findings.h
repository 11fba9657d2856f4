#pragma once
// Findings about the model itself, before any batch: parameters and buffers that already hold
// NaN or Inf in the file (`model-nonfinite`), and the root cause they give to the NaN findings
// of every batch (a prediction NaN whose origin is a bad weight names the weight, not the batch).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/report/report.h"

namespace batchcheck {

std::optional<Finding> model_nonfinite_finding(const ModelInfo& model, const std::string& model_path);

// The root cause for `output-nonfinite`, `loss-nonfinite` and `gradient-nonfinite`: the
// non-finite parameters (any mode), or buffers (eval mode: train mode normalizes with the
// batch's statistics, not the running ones); null when the model is finite.
nlohmann::ordered_json model_root_cause(const ModelInfo& model, Mode mode);

}  // namespace batchcheck
