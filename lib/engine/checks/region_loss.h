#pragma once
// The region losses of MONAI and segmentation-models-pytorch (dice, dice_ce, jaccard, focal)
// in one standard form each (MONAI's defaults: smoothing 1e-5; focal's gamma and alpha as
// configured). batchcheck needs their value's finiteness and their gradients, not the
// library's exact number: smoothing, squared predictions and class weights are not reproduced.
#include <ATen/ATen.h>

#include "core/config/config.h"

namespace batchcheck {

// The loss of predictions `out` (N, C, ...) against `tgt` in loss.target_format. The
// contract (region_contract.cpp) has accepted the shapes; values out of range are clamped
// so that the loss never raises on what the value checks already reported.
at::Tensor region_loss(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss);

}  // namespace batchcheck
