// libFuzzer target: the config parser and the recorded-order parser (loader.order) must turn
// any bytes into a value or an InputError; a parsed order's geometry and batches never read
// outside it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/errors.h"
#include "core/config/config.h"
#include "core/findings/findings.h"
#include "core/parse/order.h"
#include "core/plan/geometry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    batchcheck::parse_config("fuzz.json", text, "/base");
  } catch (const batchcheck::InputError& e) {
    // Expected for bad input; the message must format without trouble.
    (void)batchcheck::format_error(e);
  }
  try {
    auto order = std::make_shared<const batchcheck::RecordedOrder>(batchcheck::parse_order("order.json", text));
    batchcheck::LoaderSpec spec;
    spec.samples = 64;
    spec.batch_size = 4;
    spec.recorded = order;
    batchcheck::BatchPlan plan(batchcheck::compute_geometry(spec), {});
    std::vector<uint64_t> ranks;
    for (uint64_t r = 0; r < plan.geometry().spec.world_size; ++r) ranks.push_back(r);
    (void)batchcheck::geometry_findings(plan, ranks, batchcheck::LossType::CrossEntropy);
    for (uint64_t r : ranks) {
      for (uint64_t b = 0; b < plan.geometry().batches_per_rank; ++b) (void)plan.batch_indices(r, b);
    }
  } catch (const batchcheck::InputError& e) {
    (void)batchcheck::format_error(e);
  }
  return 0;
}
