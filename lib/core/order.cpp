#include "core/order.h"

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/json_input.h"

namespace batchcheck {

namespace {

using nlohmann::json;

std::string at_batch(std::size_t rank, std::size_t batch, bool ranked) {
  return (ranked ? "ranks[" + std::to_string(rank) + "][" : "[") + std::to_string(batch) + "]";
}

std::vector<std::vector<int64_t>> parse_rank(const std::string& display, const json& v, std::size_t rank, bool ranked,
                                             RecordedOrder& out) {
  const std::string where = ranked ? "ranks[" + std::to_string(rank) + "]" : "";
  if (!v.is_array()) throw InputError(display, where, "expected an array of batches (arrays of sample indices), got " + describe_json(v));
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(v.size());
  for (std::size_t b = 0; b < v.size(); ++b) {
    const json& batch = v[b];
    if (!batch.is_array()) {
      throw InputError(display, at_batch(rank, b, ranked), "expected a batch: an array of sample indices, got " + describe_json(batch));
    }
    if (batch.empty()) throw InputError(display, at_batch(rank, b, ranked), "an empty batch: a DataLoader never delivers one");
    std::vector<int64_t> indices;
    indices.reserve(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const json& e = batch[i];
      const bool ok = e.is_number_unsigned() || (e.is_number_integer() && e.get<int64_t>() >= 0);
      if (!ok || e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        throw InputError(display, at_batch(rank, b, ranked) + "[" + std::to_string(i) + "]",
                         "expected a sample index (an integer >= 0), got " + describe_json(e));
      }
      const uint64_t idx = e.get<uint64_t>();
      out.max_index = std::max(out.max_index, idx);
      indices.push_back(static_cast<int64_t>(idx));
    }
    out.largest_batch = std::max<uint64_t>(out.largest_batch, indices.size());
    batches.push_back(std::move(indices));
  }
  return batches;
}

RecordedOrder from_json(const std::string& display, const json& v) {
  RecordedOrder out;
  out.display = display;
  if (v.is_array()) {
    out.ranks.push_back(parse_rank(display, v, 0, false, out));
  } else if (v.is_object()) {
    out.ranked = true;
    JsonObject o(display, "", v);
    o.reject_unknown({"samples", "ranks"});
    out.samples = o.uint("samples");
    const json* ranks = o.find("ranks");
    if (!ranks) o.fail("ranks", "missing required key");
    if (!ranks->is_array() || ranks->empty()) {
      o.fail("ranks", "expected an array with one array of batches per rank, got " + describe_json(*ranks));
    }
    for (std::size_t r = 0; r < ranks->size(); ++r) out.ranks.push_back(parse_rank(display, (*ranks)[r], r, true, out));
    for (std::size_t r = 1; r < out.ranks.size(); ++r) {
      if (out.ranks[r].size() != out.ranks[0].size()) {
        throw InputError(display, "ranks[" + std::to_string(r) + "]",
                         "holds " + std::to_string(out.ranks[r].size()) + " batches but rank 0 holds " +
                             std::to_string(out.ranks[0].size()) +
                             ": DDP ranks must run the same number of batches (the one with more waits forever in "
                             "its gradient all-reduce)");
      }
    }
  } else {
    throw InputError(display, "", "expected an array of batches, or {\"ranks\": [...]} with one per rank, got " + describe_json(v));
  }
  return out;
}

}  // namespace

RecordedOrder load_order(const std::string& display, const std::string& path) {
  return from_json(display, read_json_file(display, path));
}

RecordedOrder parse_order(const std::string& display, const std::string& text) {
  return from_json(display, parse_json_text(display, text));
}

void check_order_fits(const RecordedOrder& order, uint64_t samples) {
  if (order.samples && *order.samples != samples) {
    throw InputError(order.display, "samples",
                     "the order was recorded for " + std::to_string(*order.samples) + " samples but the dataset holds " +
                         std::to_string(samples) + ": record it again from this data");
  }
  if (order.batches_per_rank() == 0 || order.max_index < samples) return;
  const bool ranked = order.ranked;
  for (std::size_t r = 0; r < order.ranks.size(); ++r) {
    for (std::size_t b = 0; b < order.ranks[r].size(); ++b) {
      const auto& batch = order.ranks[r][b];
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (static_cast<uint64_t>(batch[i]) >= samples) {
          throw InputError(order.display, at_batch(r, b, ranked) + "[" + std::to_string(i) + "]",
                           "sample index " + std::to_string(batch[i]) + " is outside the dataset's " +
                               std::to_string(samples) + " samples (0.." + std::to_string(samples ? samples - 1 : 0) +
                               "): the order was recorded for other data");
        }
      }
    }
  }
}

}  // namespace batchcheck
