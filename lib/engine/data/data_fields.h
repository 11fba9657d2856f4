#pragma once
// What the .npy and .pt data sources share: which fields model.inputs asks for, the
// padding keys' check, bytes per sample, and a stacked batch through the collate.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/pipeline/backend.h"

namespace batchcheck {

// The input fields model.inputs asks for, among `available` (a .pt file's keys, or the .npy
// map's), in forward's order. Throws InputError naming the missing one.
std::vector<std::string> wanted_fields(const Config& cfg, const std::vector<std::string>& available, const std::string& target,
                                       const std::string& display, const std::string& where = "");

// Every loader.collate.pad key must name a field or a role ("inputs", "targets").
void check_pad_keys(const Config& cfg, const std::vector<std::string>& inputs, const std::string& target);

// Bytes of one sample of this shape and dtype (a varying dimension counts as 1).
uint64_t meta_bytes(const TensorMeta& m);

// A stacked batch (every sample the same shape) through a padding collate: pad_sequence of
// equal lengths changes nothing but the rounding to a multiple, and its own checks.
at::Tensor collate_stacked(at::Tensor batch, const std::string& name, bool target, const CollateConfig& c);

}  // namespace batchcheck
