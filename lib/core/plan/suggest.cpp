#include "core/plan/suggest.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "core/base/int128.h"
#include "core/base/text.h"
#include "core/plan/factor.h"

namespace batchcheck {

namespace {
// Bounds the walk away from batch_size when min_tail rules out most sizes.
constexpr uint64_t kMaxSteps = 1'000'000;

bool acceptable(const SuggestRequest& r, uint64_t per_rank, uint64_t b) {
  // A batch of one is the failure we steer away from, unless it was asked for.
  if (b == 1 && r.batch_size != 1) return false;
  uint64_t tail = per_rank % b;
  if (!constraint_broken(r, b).empty()) return false;
  // The last batch is delivered unless drop_last: it must meet the step's constraints too.
  if (tail != 0 && !r.drop_last && !constraint_broken(r, tail).empty()) return false;
  return tail == 0 || tail >= r.min_tail;
}
}  // namespace

std::string constraint_broken(const SuggestRequest& r, uint64_t b) {
  for (uint64_t k : r.divides) {
    if (b == 0 || k % b != 0) return std::to_string(b) + " does not divide " + std::to_string(k) + " (--divides)";
  }
  for (uint64_t m : r.multiple_of) {
    if (m != 0 && b % m != 0) return std::to_string(b) + " is not a multiple of " + std::to_string(m) + " (--multiple-of)";
  }
  return "";
}

BatchSizeCandidate candidate(uint64_t per_rank_samples, uint64_t world_size, uint64_t batch_size) {
  BatchSizeCandidate c;
  c.batch_size = batch_size;
  c.tail = per_rank_samples % batch_size;
  c.batches = per_rank_samples / batch_size + (c.tail != 0);
  c.dropped_with_drop_last = saturating_mul(c.tail, world_size);
  return c;
}

std::vector<uint64_t> nearest_divisors(const std::vector<uint64_t>& divisors, uint64_t batch_size,
                                       std::size_t per_side) {
  auto split = std::lower_bound(divisors.begin(), divisors.end(), batch_size);
  std::vector<uint64_t> out;
  auto below = split;
  for (std::size_t i = 0; i < per_side && below != divisors.begin(); ++i) out.insert(out.begin(), *--below);
  auto above = split;
  if (above != divisors.end() && *above == batch_size) out.push_back(*above++);
  for (std::size_t i = 0; i < per_side && above != divisors.end(); ++i) out.push_back(*above++);
  return out;
}

Suggestion suggest(const SuggestRequest& request) {
  Suggestion s;
  s.request = request;
  LoaderSpec spec;
  spec.samples = request.samples;
  spec.batch_size = request.batch_size;
  spec.drop_last = request.drop_last;
  spec.world_size = request.world_size;
  spec.sampler_drop_last = request.sampler_drop_last;
  spec.accumulation_steps = request.accumulation_steps;
  s.geometry = compute_geometry(spec);
  const uint64_t per_rank = s.geometry.samples_per_rank;
  s.divisors = divisors(per_rank);
  if (per_rank == 0) return s;

  const uint64_t b = request.batch_size;
  s.requested_broken = constraint_broken(request, std::min(b, per_rank));
  const uint64_t last = per_rank % b;
  if (s.requested_broken.empty() && last != 0 && !request.drop_last && per_rank > b) {
    const std::string why = constraint_broken(request, last);
    if (!why.empty()) s.requested_broken = "the last batch of " + why;
  }
  std::vector<BatchSizeCandidate> below, above;
  // Sizes above the per-rank sample count all give one batch of everything: stop there.
  for (uint64_t x = std::min(b - 1, per_rank), steps = 0; x >= 1 && below.size() < request.per_side && steps < kMaxSteps;
       --x, ++steps) {
    if (acceptable(request, per_rank, x)) below.push_back(candidate(per_rank, request.world_size, x));
  }
  for (uint64_t x = b + 1, steps = 0; x > b && x <= per_rank && above.size() < request.per_side && steps < kMaxSteps;
       ++x, ++steps) {
    if (acceptable(request, per_rank, x)) above.push_back(candidate(per_rank, request.world_size, x));
  }
  s.nearest.assign(below.rbegin(), below.rend());
  s.nearest.insert(s.nearest.end(), above.begin(), above.end());
  return s;
}

nlohmann::ordered_json to_json(const Suggestion& s) {
  const Geometry& g = s.geometry;
  nlohmann::ordered_json j;
  j["samples"] = s.request.samples;
  j["world_size"] = s.request.world_size;
  j["per_rank_samples"] = g.samples_per_rank;
  j["batch_size"] = s.request.batch_size;
  j["tail"] = g.samples_per_rank % s.request.batch_size;
  j["drop_last"] = s.request.drop_last;
  j["sampler_drop_last"] = s.request.sampler_drop_last;
  j["min_tail"] = s.request.min_tail;
  if (!s.request.divides.empty()) j["divides"] = s.request.divides;
  if (!s.request.multiple_of.empty()) j["multiple_of"] = s.request.multiple_of;
  if (!s.request.divides.empty() || !s.request.multiple_of.empty()) {
    j["requested_ok"] = s.requested_broken.empty();
    if (!s.requested_broken.empty()) j["requested_broken"] = s.requested_broken;
  }
  j["batches_per_rank"] = g.batches_per_rank;
  j["last_batch_size"] = g.last_batch_size;
  j["padded_samples"] = g.padded_samples;
  j["dropped_samples"] = g.dropped_total();
  j["divisors"] = s.divisors;
  j["nearest"] = nlohmann::ordered_json::array();
  for (const auto& c : s.nearest) {
    j["nearest"].push_back({{"batch_size", c.batch_size},
                            {"tail", c.tail},
                            {"batches", c.batches},
                            {"dropped_with_drop_last", c.dropped_with_drop_last}});
  }
  if (s.request.accumulation_steps > 1) {
    const uint64_t k = s.request.accumulation_steps;
    j["accumulation"] = {
        {"steps", k},
        {"windows", g.windows},
        {"last_window_batches", g.last_window_batches},
        {"partial_last_window", g.batches_per_rank % k != 0},
    };
  }
  return j;
}

std::string format_table(const Suggestion& s) {
  const Geometry& g = s.geometry;
  const SuggestRequest& r = s.request;
  std::ostringstream out;
  out << "Batch geometry: " << plural(r.samples, "sample") << ", batch size " << r.batch_size;
  if (r.world_size > 1) out << ", " << r.world_size << " ranks";
  if (r.drop_last) out << ", drop_last";
  out << "\n";
  if (r.world_size > 1) {
    out << "  DistributedSampler: " << plural(g.samples_per_rank, "sample") << " per rank";
    if (g.padded_samples) out << " (" << plural(g.padded_samples, "sample") << " repeated as padding)";
    if (g.sampler_dropped) out << " (" << plural(g.sampler_dropped, "sample") << " cut by drop_last)";
    out << "\n";
  }
  out << "  batches per rank: " << g.batches_per_rank;
  if (g.batches_per_rank == 0) {
    out << "  <- empty loader\n";
  } else if (g.last_batch_size == r.batch_size) {
    out << " (all full)\n";
  } else {
    out << " (" << g.full_batches << " full, the last holds " << plural(g.last_batch_size, "sample") << ")"
        << (g.last_batch_size == 1 ? "  <- a batch of one" : "") << "\n";
  }
  if (g.dropped_total()) out << "  dropped per epoch: " << plural(g.dropped_total(), "sample") << "\n";
  if (r.accumulation_steps > 1) {
    out << "  accumulation: " << g.windows << " windows of " << r.accumulation_steps << " micro-batches";
    if (g.batches_per_rank % r.accumulation_steps) {
      out << ", the last has " << g.last_window_batches;
    }
    out << "\n";
  }
  out << "\nExact divisors of " << g.samples_per_rank << ": ";
  if (s.divisors.size() > 64) {
    std::vector<uint64_t> head(s.divisors.begin(), s.divisors.begin() + 64);
    out << join_uints(head) << ", ... (" << s.divisors.size() << " in all; --json lists them)\n";
  } else {
    out << (s.divisors.empty() ? "none" : join_uints(s.divisors)) << "\n";
  }
  if (!s.requested_broken.empty()) out << "  batch size " << r.batch_size << " fails your step's constraint: " << s.requested_broken << "\n";
  std::string also;
  for (uint64_t k : r.divides) also += ", dividing " + std::to_string(k);
  for (uint64_t m : r.multiple_of) also += ", a multiple of " + std::to_string(m);
  if (!also.empty()) also += (r.drop_last ? "" : " (the last batch too)");
  out << "\nNearest batch sizes with a tail of 0 or at least " << r.min_tail << also << ":\n";
  if (s.nearest.empty()) {
    out << "  none\n";
    return out.str();
  }
  out << "  " << std::setw(12) << "batch_size" << std::setw(8) << "tail" << std::setw(10) << "batches"
      << std::setw(24) << "dropped_with_drop_last" << "\n";
  for (const auto& c : s.nearest) {
    out << "  " << std::setw(12) << c.batch_size << std::setw(8) << c.tail << std::setw(10) << c.batches
        << std::setw(24) << c.dropped_with_drop_last << "\n";
  }
  return out.str();
}

}  // namespace batchcheck
