#pragma once
// The value stage's findings: NaN/Inf and out-of-contract values of inputs, predictions
// and targets, each attributed to the samples (rows) that hold them, with the message,
// the evidence and the CUDA equivalent. Pure: runs on the scan's worker thread too.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/pipeline/backend.h"
#include "core/pipeline/value_check.h"

namespace batchcheck {

// A finding occurrence produced by a stage, recorded by the scanner in (rank, batch) order.
struct Emitted {
  std::string id, stage, message;
  nlohmann::ordered_json evidence;
  std::vector<uint64_t> rows;  // rows of the batch
  uint64_t total = 0;
  std::string cuda;
};

// Every row of a batch: a failure of the whole batch (forward, shapes, loss) concerns all samples.
std::vector<uint64_t> all_rows(uint64_t n);

// `stats` is view.check(slot, rule), already known not ok. rows_are_samples false: the
// tensor's rows are not the batch's (batch-dim-mismatch), so findings concern the whole batch.
// row_samples: the sample (position in the batch) of each of the tensor's rows, where the batch's
// own index structure proves it (a graph's batch vector, offsets, lengths): rows become samples.
std::vector<Emitted> value_findings(Slot slot, const ValueRule& rule, const TensorMeta& meta, BatchView& view,
                                    ValueStats stats, const LossConfig& loss, uint64_t batch_size, bool rows_are_samples,
                                    const std::vector<uint64_t>* row_samples = nullptr);

// The samples of `s`'s bad rows through row_samples: distinct, ascending; a row past the map or
// a sample past the batch is dropped (a map is believed only as far as it goes).
void rows_to_samples(ValueStats& s, const std::vector<uint64_t>& row_samples, uint64_t batch_size);

}  // namespace batchcheck
