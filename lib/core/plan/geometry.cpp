#include "core/plan/geometry.h"

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>

#include "core/base/errors.h"
#include "core/base/int128.h"
#include "core/base/json_input.h"

namespace batchcheck {

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// Distinct samples a recorded order delivers (all < samples, as check_order_fits made sure),
// in memory bounded by the order, not by the dataset, whose size a data file claims (a
// zero-width .npy may say 2^61 samples): a bitmap of the dataset when it is no larger than a
// copy of the indices, else the sorted copy.
uint64_t distinct_samples(const RecordedOrder& o, uint64_t samples) {
  uint64_t total = 0;
  for (const auto& rank : o.ranks) {
    for (const auto& batch : rank) total += batch.size();
  }
  if (samples / 64 <= total) {
    std::vector<bool> seen(static_cast<std::size_t>(samples), false);
    uint64_t distinct = 0;
    for (const auto& rank : o.ranks) {
      for (const auto& batch : rank) {
        for (int64_t i : batch) {
          if (!seen[static_cast<std::size_t>(i)]) {
            seen[static_cast<std::size_t>(i)] = true;
            ++distinct;
          }
        }
      }
    }
    return distinct;
  }
  std::vector<int64_t> all;
  all.reserve(static_cast<std::size_t>(total));
  for (const auto& rank : o.ranks) {
    for (const auto& batch : rank) all.insert(all.end(), batch.begin(), batch.end());
  }
  std::sort(all.begin(), all.end());
  return static_cast<uint64_t>(std::unique(all.begin(), all.end()) - all.begin());
}

}  // namespace


LoaderSpec loader_spec(const LoaderConfig& loader, uint64_t samples) {
  LoaderSpec s;
  s.samples = samples;
  s.batch_size = loader.batch_size;
  s.drop_last = loader.drop_last;
  s.shuffle = loader.shuffle;
  s.seed = loader.seed;
  s.epoch = loader.epoch;
  s.world_size = loader.world_size;
  s.sampler_drop_last = loader.sampler_drop_last;
  s.accumulation_steps = loader.accumulation_steps;
  s.distributed_sampler = loader.sampler == SamplerKind::Distributed;
  s.seed_negative = loader.seed_negative;
  s.recorded = loader.order;
  s.share = loader.order_rank;
  return s;
}

std::string pytorch_loader_call(const LoaderConfig& l) {
  if (l.order) {
    return "DataLoader(ds, batch_sampler=batches)  # batches: the " + std::to_string(l.order->batches_per_rank()) +
           " batches per rank recorded in " + l.order->display;
  }
  const std::string seed = l.seed_negative ? std::to_string(static_cast<int64_t>(l.seed)) : std::to_string(l.seed);
  std::string call = "DataLoader(ds, batch_size=" + std::to_string(l.batch_size);
  std::string after;
  switch (l.sampler) {
    case SamplerKind::Sequential: break;
    case SamplerKind::Random:
      call += ", shuffle=True, generator=torch.Generator().manual_seed(" + seed + ")";
      if (l.epoch > 0) after = "  # pass " + std::to_string(l.epoch) + " (0-based) over this one loader";
      break;
    case SamplerKind::Distributed: {
      std::string sampler = "DistributedSampler(ds, num_replicas=" + std::to_string(l.world_size) + ", rank=r";
      if (!l.shuffle) sampler += ", shuffle=False";
      if (l.seed != 0 || l.seed_negative) sampler += ", seed=" + seed;
      if (l.sampler_drop_last) sampler += ", drop_last=True";
      call += ", sampler=" + sampler + ")";
      if (l.epoch > 0) after = "; sampler.set_epoch(" + std::to_string(l.epoch) + ")";
      break;
    }
  }
  if (l.drop_last) call += ", drop_last=True";
  return call + ")" + after;
}

Geometry compute_geometry(const LoaderSpec& spec) {
  if (spec.batch_size == 0 || spec.world_size == 0 || spec.accumulation_steps == 0) {
    throw InternalError("compute_geometry: batch_size, world_size and accumulation_steps must be >= 1");
  }
  Geometry g;
  g.spec = spec;
  if (spec.recorded) {
    const RecordedOrder& o = *spec.recorded;
    check_order_fits(o, spec.samples);
    g.spec.world_size = std::max<std::size_t>(1, o.ranks.size());
    g.batches_per_rank = o.batches_per_rank();
    for (const auto& batch : o.ranks.front()) {
      g.samples_per_rank += batch.size();
      if (batch.size() >= spec.batch_size) ++g.full_batches;
    }
    g.last_batch_size = g.batches_per_rank ? o.ranks.front().back().size() : 0;
    g.recorded_undelivered = spec.samples - distinct_samples(o, spec.samples);
    g.recorded_uniform = g.recorded_undelivered == 0 && g.batches_per_rank > 0;
    for (const auto& rank : o.ranks) {
      for (std::size_t k = 0; k < rank.size() && g.recorded_uniform; ++k) {
        const uint64_t size = rank[k].size();
        g.recorded_uniform = k + 1 < rank.size() ? size == spec.batch_size : size >= 1 && size <= spec.batch_size;
      }
      g.recorded_uniform = g.recorded_uniform && rank.size() == o.ranks.front().size() &&
                           (rank.empty() || rank.back().size() == o.ranks.front().back().size());
    }
    const uint64_t k = spec.accumulation_steps;
    g.windows = ceil_div(g.batches_per_rank, k);
    g.last_window_batches = g.batches_per_rank == 0 ? 0 : (g.batches_per_rank % k == 0 ? k : g.batches_per_rank % k);
    return g;
  }
  const uint64_t n = spec.samples, w = spec.world_size, b = spec.batch_size;
  if (w == 1) {
    g.samples_per_rank = n;
  } else if (spec.sampler_drop_last && n % w != 0) {
    // PyTorch: math.ceil((N - W) / W), which is 0 when N < W. Exact integer
    // arithmetic equals PyTorch's float division for every N below 2^53.
    g.samples_per_rank = n < w ? 0 : ceil_div(n - w, w);
    g.sampler_dropped = n - g.samples_per_rank * w;
  } else {
    g.samples_per_rank = ceil_div(n, w);
    // total_size - N, without forming total_size (it may not fit in 64 bits).
    g.padded_samples = n % w == 0 ? 0 : w - n % w;
  }
  const uint64_t per_rank = g.samples_per_rank;
  g.full_batches = per_rank / b;
  const uint64_t tail = per_rank % b;
  if (spec.drop_last) {
    g.batches_per_rank = g.full_batches;
    g.loader_dropped_per_rank = tail;
    g.last_batch_size = g.batches_per_rank ? b : 0;
  } else {
    g.batches_per_rank = g.full_batches + (tail != 0);
    g.last_batch_size = tail != 0 ? tail : (g.batches_per_rank ? b : 0);
  }
  const uint64_t k = spec.accumulation_steps;
  g.windows = ceil_div(g.batches_per_rank, k);
  g.last_window_batches = g.batches_per_rank == 0 ? 0 : (g.batches_per_rank % k == 0 ? k : g.batches_per_rank % k);
  return g;
}

uint64_t Geometry::delivered_slots() const {
  const uint64_t per_rank = spec.drop_last ? full_batches * spec.batch_size : samples_per_rank;
  return saturating_mul(per_rank, spec.world_size);
}

uint64_t Geometry::dropped_total() const {
  if (spec.recorded) return recorded_undelivered;
  const uint64_t delivered = delivered_slots();
  return delivered >= spec.samples ? 0 : spec.samples - delivered;
}

uint64_t Geometry::delivered_padding() const {
  if (spec.recorded) return 0;
  const uint64_t delivered = delivered_slots();
  return delivered <= spec.samples ? 0 : std::min(delivered - spec.samples, padded_samples);
}

uint64_t Geometry::batch_size_at(uint64_t batch_index) const {
  if (batch_index >= batches_per_rank) return 0;
  if (spec.recorded) return spec.recorded->ranks.front()[batch_index].size();
  return batch_index + 1 == batches_per_rank ? last_batch_size : spec.batch_size;
}

BatchPlan::BatchPlan(Geometry geometry, std::vector<int64_t> order)
    : geometry_(std::move(geometry)), order_(std::move(order)) {
  if (!order_.empty() && order_.size() != geometry_.spec.samples) {
    throw InternalError("BatchPlan: the permutation does not cover the dataset");
  }
}

int64_t BatchPlan::order_at(uint64_t i) const {
  // DistributedSampler pads with the list's own first entries, tiled: entry i of the
  // padded list is entry i mod N of the original.
  const uint64_t n = geometry_.spec.samples;
  const uint64_t j = i % n;
  return order_.empty() ? static_cast<int64_t>(j) : order_[j];
}

int64_t BatchPlan::sample_index(uint64_t rank, uint64_t position) const {
  if (rank >= geometry_.spec.world_size || position >= geometry_.samples_per_rank) {
    throw InternalError("BatchPlan::sample_index out of range");
  }
  // indices[rank : total_size : num_replicas]
  uint128 global = static_cast<uint128>(position) * geometry_.spec.world_size + rank;
  return order_at(static_cast<uint64_t>(global % geometry_.spec.samples));
}

std::vector<int64_t> BatchPlan::batch_indices(uint64_t rank, uint64_t batch_index) const {
  if (geometry_.spec.recorded) return geometry_.spec.recorded->ranks.at(rank).at(batch_index);
  const uint64_t size = geometry_.batch_size_at(batch_index);
  std::vector<int64_t> out;
  try {
    out.reserve(size);
  } catch (const std::exception&) {
    // bad_alloc or length_error: the machine's limit, not a bug. A batch of one-byte samples
    // needs 8 times more for its indices than for its data, so this fails first.
    throw InputError("", "loader.batch_size",
                     "a batch of " + std::to_string(size) + " samples needs " + format_bytes(static_cast<long double>(size) * 8) +
                         " for its sample indices alone, and allocating them failed: not enough memory (RAM, or the "
                         "limit of ulimit -v) for this batch size");
  }
  const uint64_t start = batch_index * geometry_.spec.batch_size;
  for (uint64_t i = 0; i < size; ++i) out.push_back(sample_index(rank, start + i));
  return out;
}

int64_t BatchPlan::padded_sample(uint64_t k, uint64_t* rank) const {
  const uint64_t n = geometry_.spec.samples;
  if (k >= geometry_.padded_samples) throw InternalError("BatchPlan::padded_sample out of range");
  // Padding follows the N real entries; N + k may pass 2^64 when N and W are both huge.
  const uint128 global = static_cast<uint128>(n) + k;
  if (rank) *rank = static_cast<uint64_t>(global % geometry_.spec.world_size);
  return order_at(static_cast<uint64_t>(global % n));
}

std::vector<uint64_t> produced_sizes(const Geometry& g) {
  std::vector<uint64_t> out;
  if (g.recorded()) {
    std::set<uint64_t> sizes;
    for (const auto& rank : g.spec.recorded->ranks) {
      for (const auto& batch : rank) sizes.insert(batch.size());
    }
    return std::vector<uint64_t>(sizes.rbegin(), sizes.rend());
  }
  if (g.full_batches > 0) out.push_back(g.spec.batch_size);
  if (g.last_batch_size > 0 && g.last_batch_size != g.spec.batch_size) out.push_back(g.last_batch_size);
  return out;
}

// The smallest dataset at least as large as this one whose loader ends on a batch of `size`.
uint64_t dataset_size_for_tail(const Geometry& g, uint64_t size) {
  const uint64_t b = g.spec.batch_size, w = g.spec.world_size;
  // 128-bit: near 2^64 samples the next tail's dataset no longer fits (saturated).
  uint128 per_rank = static_cast<uint128>(g.samples_per_rank - g.samples_per_rank % b) + size;
  if (per_rank < g.samples_per_rank) per_rank += b;
  return per_rank > UINT64_MAX / w ? UINT64_MAX : static_cast<uint64_t>(per_rank * w);
}

namespace {

// A DistributedSampler's share of `samples` over `world` ranks: (with drop_last, without).
std::pair<uint64_t, uint64_t> sampler_shares(uint64_t samples, uint64_t world) {
  return {samples / world, samples / world + (samples % world ? 1 : 0)};
}

}  // namespace

void check_rank_share(const Geometry& g, const std::string& config_file) {
  if (!g.spec.share || !g.spec.recorded) return;
  const LoaderConfig::RankShare& r = *g.spec.share;
  const uint64_t samples = g.spec.samples;
  const auto [low, high] = sampler_shares(samples, r.world_size);
  const std::string ranks = std::to_string(samples) + " samples over " + std::to_string(r.world_size) + " ranks";
  if (r.samples && r.samples != low && r.samples != high) {
    throw InputError(config_file, "loader.order_rank.samples",
                     std::to_string(r.samples) + " is not a DistributedSampler's share of " + ranks + " (" +
                         (low == high ? std::to_string(high) : std::to_string(low) + " with drop_last=True, else " + std::to_string(high)) +
                         ")");
  }
  const uint64_t share = r.samples ? r.samples : high;
  const uint64_t delivered = g.samples_per_rank;  // the order's one rank: every index it delivers
  if (delivered > share) {
    throw InputError(config_file, "loader.order_rank",
                     "the order delivers " + std::to_string(delivered) + " samples, more than rank " + std::to_string(r.rank) +
                         " of " + std::to_string(r.world_size) + "'s share of " + ranks + " (" + std::to_string(share) +
                         "): it is not one rank's share; leave order_rank out, or record that rank's own order");
  }
}

bool share_covers(const LoaderConfig::RankShare& r, uint64_t samples, uint64_t missing) {
  if (r.world_size < 2) return false;
  const uint64_t share = r.samples ? r.samples : sampler_shares(samples, r.world_size).second;
  return static_cast<uint128>(missing) <= static_cast<uint128>(r.world_size - 1) * share;
}

}  // namespace batchcheck
