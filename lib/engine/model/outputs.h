#pragma once
// What forward returned, as the loss sees it: the prediction (model.output) and the extra
// outputs the training loss adds (loss.aux), each a dense tensor of real numbers.
// Engine-internal.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <vector>

#include "core/config/config.h"

namespace batchcheck {

struct SelectedOutputs {
  at::Tensor prediction;
  std::vector<at::Tensor> aux;  // in loss.aux order
  // Loss type "model": the losses forward returned, by name ("loss" for a single tensor); the
  // prediction is then their sum, the loss the training loop back-propagates.
  std::vector<std::pair<std::string, at::Tensor>> loss_terms;
};

// Throws InputError naming model.output or loss.aux when the selection does not fit what the
// model returns (a missing key, an index out of range, not a tensor, a sparse tensor, ...).
SelectedOutputs select_outputs(const c10::IValue& out, const Config& cfg);

}  // namespace batchcheck
