#include "core/parse/order.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/base/errors.h"
#include "core/base/files.h"
#include "core/base/json_input.h"
#include "core/base/limits.h"

namespace batchcheck {

namespace {

using nlohmann::json;

std::string at_batch(std::size_t rank, std::size_t batch, bool ranked) {
  return (ranked ? "ranks[" + std::to_string(rank) + "][" : "[") + std::to_string(batch) + "]";
}

bool blank(const std::string& text) { return text.find_first_not_of(" \t\r\n") == std::string::npos; }

// nlohmann's SAX events straight into a RecordedOrder: no JSON document is built, so an order
// costs its batches' own memory (8 bytes an index), which max_bytes bounds, whatever the file
// holds; and an element of the wrong kind is refused where it starts, before it is read.
class OrderReader {
 public:
  // on_error(position, e): throws the parser's error (a syntax error, a number that overflows).
  using OnError = std::function<void(std::size_t, const json::exception&)>;
  OrderReader(const std::string& display, uint64_t max_bytes, OnError on_error, RecordedOrder& out)
      : display_(display), max_bytes_(max_bytes), on_error_(std::move(on_error)), out_(out) {
    out_.display = display;
  }

  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return scalar(json(v)); }
  bool string(json::string_t& v) { return scalar(json(v)); }
  bool binary(json::binary_t&) { return scalar(json::binary({})); }  // not in JSON text

  bool start_object(std::size_t) {
    if (levels_.empty()) {
      out_.ranked = true;
      levels_.push_back(Level::Top);
      return true;
    }
    return scalar(json::object());  // every other place an object can appear is wrong: say so
  }
  bool key(json::string_t& k) {
    if (k != "samples" && k != "ranks") {
      const json one = {{k, nullptr}};
      JsonObject(display_, "", one).reject_unknown({"samples", "ranks"});
    }
    if ((k == "ranks" && ranks_seen_) || (k == "samples" && samples_seen_)) fail(k, "appears twice; keep one");
    (k == "ranks" ? ranks_seen_ : samples_seen_) = true;
    key_ = k;
    return true;
  }
  bool end_object() {
    levels_.pop_back();
    if (!ranks_seen_) fail("ranks", "missing required key");
    return true;
  }

  bool start_array(std::size_t) {
    if (levels_.empty()) {
      levels_.push_back(Level::Rank);
      return new_rank();
    }
    switch (levels_.back()) {
      case Level::Top:
        if (key_ != "ranks") return scalar(json::array());
        levels_.push_back(Level::Ranks);
        return true;
      case Level::Ranks:
        if (out_.ranks.size() == kMaxWorldSize) {
          fail("ranks[" + std::to_string(kMaxWorldSize) + "]",
               "more than " + std::to_string(kMaxWorldSize) + " ranks (2^20), the most batchcheck replays: it checks every "
               "rank and keeps state for each");
        }
        levels_.push_back(Level::Rank);
        return new_rank();
      case Level::Rank:
        levels_.push_back(Level::Batch);
        out_.ranks.back().emplace_back();
        return spend(kOrderBatchBytes);
      case Level::Batch: return scalar(json::array());
    }
    return true;
  }
  bool end_array() {
    const Level level = levels_.back();
    levels_.pop_back();
    if (level == Level::Ranks && out_.ranks.empty()) {
      fail("ranks", "expected an array with one array of batches per rank, got an array");
    }
    if (level == Level::Rank && out_.ranks.size() > 1 && out_.ranks.back().size() != out_.ranks.front().size()) {
      throw InputError(display_, "ranks[" + std::to_string(out_.ranks.size() - 1) + "]",
                       "holds " + std::to_string(out_.ranks.back().size()) + " batches but rank 0 holds " +
                           std::to_string(out_.ranks.front().size()) +
                           ": DDP ranks must run the same number of batches (the one with more waits forever in "
                           "its gradient all-reduce)");
    }
    if (level == Level::Batch) {
      std::vector<int64_t>& batch = out_.ranks.back().back();
      if (batch.empty()) throw InputError(display_, batch_where(0), "an empty batch: a DataLoader never delivers one");
      batch.shrink_to_fit();  // the accounting counts 8 bytes an index
      out_.largest_batch = std::max<uint64_t>(out_.largest_batch, batch.size());
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const json::exception& e) {
    on_error_(position, e);
    throw InternalError("OrderReader: the JSON error was not thrown");
  }

 private:
  // Top: {"samples", "ranks"}; Ranks: its "ranks"; Rank: one rank's batches (the whole file
  // when it is an array); Batch: one batch's sample indices.
  enum class Level { Top, Ranks, Rank, Batch };

  // A value that is not an array starting a rank or a batch, or an index: right only as an
  // index or `samples`.
  bool scalar(const json& v) {
    if (levels_.empty()) {
      throw InputError(display_, "", "expected an array of batches, or {\"ranks\": [...]} with one per rank, got " + describe_json(v));
    }
    switch (levels_.back()) {
      case Level::Top:
        if (key_ == "samples") {
          const json one = {{"samples", v}};
          out_.samples = JsonObject(display_, "", one).uint("samples");
        } else {
          fail("ranks", "expected an array with one array of batches per rank, got " + describe_json(v));
        }
        return true;
      case Level::Ranks:
        throw InputError(display_, "ranks[" + std::to_string(out_.ranks.size()) + "]",
                         "expected an array of batches (arrays of sample indices), got " + describe_json(v));
      case Level::Rank:
        throw InputError(display_, at_batch(out_.ranks.size() - 1, out_.ranks.back().size(), out_.ranked),
                         "expected a batch: an array of sample indices, got " + describe_json(v));
      case Level::Batch: {
        std::vector<int64_t>& batch = out_.ranks.back().back();
        const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
        if (!ok || v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
          throw InputError(display_, batch_where(batch.size()), "expected a sample index (an integer >= 0), got " + describe_json(v));
        }
        const uint64_t idx = v.get<uint64_t>();
        out_.max_index = std::max(out_.max_index, idx);
        spend(sizeof(int64_t));
        batch.push_back(static_cast<int64_t>(idx));
        return true;
      }
    }
    return true;
  }

  bool new_rank() {
    out_.ranks.emplace_back();
    return spend(sizeof(out_.ranks.back()));
  }

  // Counts what the batches take, refusing them past max_bytes where they are.
  bool spend(uint64_t bytes) {
    bytes_ += bytes;
    if (bytes_ <= max_bytes_) return true;
    const std::vector<int64_t>* batch = levels_.back() == Level::Batch ? &out_.ranks.back().back() : nullptr;
    throw InputError(display_, batch ? batch_where(batch->size()) : "",
                     "the recorded batches take more than " + format_bytes(max_bytes_) + " in memory by here (8 bytes a sample index, " +
                         std::to_string(kOrderBatchBytes) + " a batch), the most batchcheck holds of a recorded order");
  }

  // The current batch, or index `i` in it: "[b][i]" or "ranks[r][b][i]".
  std::string batch_where(std::size_t i) const {
    const std::size_t r = out_.ranks.size() - 1, b = out_.ranks.back().size() - 1;
    std::string where = at_batch(r, b, out_.ranked);
    return levels_.back() == Level::Batch ? where + "[" + std::to_string(i) + "]" : where;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const { throw InputError(display_, key, what); }

  const std::string& display_;
  uint64_t max_bytes_;
  OnError on_error_;
  RecordedOrder& out_;
  std::vector<Level> levels_;
  std::string key_;  // in Top: the key whose value comes next
  bool ranks_seen_ = false, samples_seen_ = false;
  uint64_t bytes_ = 0;
};

}  // namespace

RecordedOrder load_order(const std::string& display, const std::string& path, uint64_t max_bytes) {
  // Streamed from the file: memory is the batches', never the file's text.
  require_regular_file(display, path, "a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(display, "", std::string("cannot read: ") + std::strerror(errno));
  const auto on_error = [&](std::size_t position, const json::exception& e) {
    std::ifstream again(path, std::ios::binary);
    throw_json_error(display, again, position, e);
  };
  RecordedOrder out;
  OrderReader reader(display, max_bytes, on_error, out);
  json::sax_parse(static_cast<std::istream&>(in), &reader);
  if (in.bad()) throw InputError(display, "", "read error");
  return out;
}

RecordedOrder parse_order(const std::string& display, const std::string& text, uint64_t max_bytes) {
  if (blank(text)) throw InputError(display, "1:1", "the file is empty; expected a JSON object");
  RecordedOrder out;
  OrderReader reader(display, max_bytes, [&](std::size_t, const json::exception& e) { throw_json_error(display, text, e); }, out);
  json::sax_parse(text, &reader);
  return out;
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
