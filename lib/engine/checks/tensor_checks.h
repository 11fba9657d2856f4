#pragma once
// What the backend reads from tensors (engine-internal): the check kernel's view of a
// tensor, a field's values, the loss, the gradients.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/pipeline/value_check.h"

namespace batchcheck {

// A float32, float64 or int64 tensor in CPU memory, contiguous, for the check kernel: the
// tensor itself when it is one already.
at::Tensor for_kernel(at::Tensor t);
// The kernel over a for_kernel() tensor, its first dimension the rows.
ValueStats check_tensor(const at::Tensor& t, const ValueRule& rule);
// A field's batch: a tensor, or a list of samples (loader.collate.list), each checked as a row.
ValueStats check_value(const c10::IValue& v, const ValueRule& rule);
// NaN/Inf only: the check the staged inputs already had.
bool plain_finite_rule(const ValueRule& r);
bool floating_value(const c10::IValue& v);
// The batch's shape: a list of samples is [N, d...] with -1 where the samples differ.
TensorMeta meta_of_value(const c10::IValue& v);

// The loss of one batch, and whether it is finite. Never throws for a failing loss.
// With `keep`, the loss is computed with autograd and stored there for backward().
LossResult run_loss(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss, const c10::Device& device,
                    bool sync, at::Tensor* keep = nullptr);

// The parameters whose gradients hold NaN or Inf, with exact counts, into `r`.
void check_gradients(const std::vector<std::pair<std::string, at::Tensor>>& params, BackwardResult& r);

}  // namespace batchcheck
