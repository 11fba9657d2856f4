#pragma once
// A long scan's report made by the real Aggregator from synthetic steps (no model): for the
// size bounds of the report's series and of its HTML view, and for the browser test.
#include <cmath>
#include <sstream>
#include <string>

#include "core/config/config.h"
#include "core/journal/aggregate.h"

namespace batchcheck::test_util {

// `batches_per_rank` batches of 16 on each of 2 DDP ranks, the last of 1 sample. Every 997th
// batch's prediction holds NaNs (an error), every 10,007th has a target out of range; the loss drifts.
inline nlohmann::ordered_json synthetic_report(uint64_t batches_per_rank) {
  const uint64_t per_rank_samples = (batches_per_rank - 1) * 16 + 1;
  std::ostringstream cfg_text;
  cfg_text << R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},)"
           << R"("loader": {"batch_size": 16, "sampler": "distributed", "world_size": 2, "shuffle": false},)"
           << R"("loss": {"type": "bce"}})";
  static Config cfg;  // the Aggregator keeps a reference until the report is built
  cfg = parse_config("synthetic.json", cfg_text.str(), ".");
  ScanSettings settings;
  std::ostringstream log;
  Aggregator agg(cfg, settings, log);
  ScanStart s;
  s.data.samples = 2 * per_rank_samples;
  s.ranks = {0, 1};
  s.replay_steps = 2 * batches_per_rank;
  s.device = "cpu";
  agg.start(s);
  std::vector<int64_t> indices(16);
  for (uint64_t step = 0; step < s.replay_steps; ++step) {
    const uint64_t rank = step / batches_per_rank, b = step % batches_per_rank;
    const uint64_t size = b + 1 == batches_per_rank ? 1 : 16;
    indices.resize(size);
    for (uint64_t k = 0; k < size; ++k) indices[k] = static_cast<int64_t>(2 * (b * 16 + k) + rank);
    StepInfo at{step, rank, b, false, size};
    agg.begin(at, indices);
    BatchStats st;
    const double x = static_cast<double>(b) / static_cast<double>(batches_per_rank);
    st.pred_min = 0.05 + 0.02 * std::sin(x * 40);
    st.pred_max = 0.95 - 0.02 * std::cos(x * 30);
    st.band_lo = 0;
    st.band_hi = 1;
    if (b % 997 == 996) {
      st.pred_nonfinite = 16;
      RecordEvent r;
      r.at = at;
      r.id = "output-nonfinite";
      r.stage = "output";
      r.message = "predictions hold 16 NaNs in 1 sample of a batch of 16";
      r.evidence = {{"nan", 16}};
      r.samples = {indices[3]};
      r.count = 1;
      r.batch_indices = indices;
      agg.record(std::move(r));
    } else {
      st.loss = 0.7 - 0.4 * x + 0.01 * std::sin(static_cast<double>(b));
    }
    if (b % 10007 == 5) {
      RecordEvent r;
      r.at = at;
      r.id = "target-out-of-range";
      r.stage = "target";
      r.message = "targets hold <script>alert(1)</script> & 255";
      r.samples = {indices[0]};
      r.count = 1;
      r.batch_indices = indices;
      agg.record(std::move(r));
    }
    agg.end({step, true, size, std::nullopt, st});
  }
  agg.finish({true, false});
  return agg.result(agg.end_state()).report;
}

}  // namespace batchcheck::test_util
