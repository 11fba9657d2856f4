#pragma once
// The fixes a replay finding carries: a pure function of the finding and its setup, so
// every case is table-tested (tests/test_fixes.cpp). Geometry findings build theirs in
// findings.cpp with the same builders.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/plan/geometry.h"
#include "core/report/report.h"

namespace batchcheck {

struct FixContext {
  const Geometry* geometry = nullptr;
  LossConfig loss;
  Mode mode = Mode::Train;
  bool backward = false;
  std::optional<std::variant<int64_t, std::string>> output;  // model.output
  bool collate_pads = false;  // loader.collate pads a field: the user's own collate_fn builds batches
  bool collate_list = false;  // loader.collate.list: tuple(zip(*batch))
  std::string collate_fn;     // loader.collate_fn: the user's collate function, by its name
  ForwardCall call;  // how batchcheck.scan() calls forward on the batch; empty: model(x)
  // The torch.autocast the scan ran forward in ("float16", "cuda"); empty: none of its own.
  std::string autocast_dtype, autocast_device = "cpu";
  // Every sample of the finding's first failing batch, in delivery order (for `reproduce`).
  std::vector<int64_t> batch_indices;
};

// Appends the fixes for a replay or probe finding (not the geometry findings).
void attach_fixes(Finding& f, const FixContext& ctx);

// The class name of a region loss in MONAI and smp ("DiceLoss"); the config name otherwise.
std::string loss_class(LossType t);
// `nn.BCELoss()`, `nn.CrossEntropyLoss(ignore_index=255)`: the loss as the user would
// construct it, with the configured options (`loss_fn` for a region loss: the user's object).
std::string loss_constructor(const LossConfig& loss);
// `range(8, 16)` for consecutive indices, else `[3, 9, 1]`.
std::string python_indices(const std::vector<int64_t>& indices);

}  // namespace batchcheck
