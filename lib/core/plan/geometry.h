#pragma once
// Batch geometry exactly as torch.utils.data.DataLoader (and DistributedSampler)
// deliver it. Counts are O(1) arithmetic; indices are produced on demand.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/limits.h"
#include "core/config/config.h"
#include "core/parse/order.h"

namespace batchcheck {

struct LoaderSpec {
  uint64_t samples = 0;
  uint64_t batch_size = 1;
  bool drop_last = false;
  bool shuffle = false;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t world_size = 1;  // > 1: DistributedSampler(num_replicas=world_size)
  bool sampler_drop_last = false;
  uint64_t accumulation_steps = 1;
  bool distributed_sampler = false;  // DistributedSampler even at world_size 1 (DDP on one GPU)
  bool seed_negative = false;        // `seed` is a negative seed's two's complement
  // loader.order: the batches as recorded; world_size is its number of ranks.
  std::shared_ptr<const RecordedOrder> recorded;
  std::optional<LoaderConfig::RankShare> share;  // loader.order_rank

  bool uses_distributed_sampler() const { return distributed_sampler || world_size > 1; }
  // A rank's number as the user knows it: a recorded share's own rank R (its order's one rank is
  // index 0 inside), else the index itself.
  uint64_t rank_id(uint64_t index) const { return share ? share->rank : index; }
};

LoaderSpec loader_spec(const LoaderConfig& loader, uint64_t samples);

// The PyTorch call whose batches the replay reproduces, as code a user can hold next to
// their own script: `DataLoader(ds, batch_size=5, sampler=DistributedSampler(ds, ...))`.
std::string pytorch_loader_call(const LoaderConfig& loader);

struct Geometry {
  LoaderSpec spec;
  uint64_t samples_per_rank = 0;  // DistributedSampler.num_samples (N without one)
  uint64_t padded_samples = 0;    // repeated by DistributedSampler to even out the ranks
  uint64_t sampler_dropped = 0;   // cut by DistributedSampler(drop_last=True)
  uint64_t batches_per_rank = 0;
  uint64_t full_batches = 0;
  uint64_t last_batch_size = 0;          // size of the last delivered batch; 0 if none
  uint64_t loader_dropped_per_rank = 0;  // the tail DataLoader(drop_last=True) discards
  uint64_t windows = 0;                  // accumulation windows per rank
  uint64_t last_window_batches = 0;      // micro-batches in the last window (K when full)
  uint64_t recorded_undelivered = 0;     // a recorded order: distinct samples in no batch of any rank
  // A recorded order whose batches are batch_size but each rank's last (a shuffled loader's
  // RandomSampler under batch_size): DataLoader's batch_size and drop_last decide its tail
  // exactly as for an order batchcheck computes.
  bool recorded_uniform = false;

  bool distributed() const { return spec.world_size > 1; }
  bool recorded() const { return spec.recorded != nullptr; }
  // Distinct samples that reach no rank in an epoch (sampler cut + every rank's dropped
  // tail, where a dropped padding copy does not count: its original is delivered). <= N.
  uint64_t dropped_total() const;
  // Sampler slots delivered over all ranks: the slot list is dealt round-robin, so the
  // delivered slots are exactly its first delivered_per_rank * W entries (saturated).
  uint64_t delivered_slots() const;
  // DistributedSampler padding copies that a rank actually receives (drop_last may cut them).
  uint64_t delivered_padding() const;
  uint64_t batch_size_at(uint64_t batch_index) const;
};

// O(1) for any 64-bit sizes; throws InternalError if batch_size or world_size is 0. A
// recorded order's geometry is read from its batches (rank 0's sizes; InputError when the
// order does not fit the dataset).
Geometry compute_geometry(const LoaderSpec& spec);

// The dataset indices of each rank's batches. `order` is the sampler's permutation of
// [0, N) (see engine/data/permutation.h); empty means sequential, which needs no memory.
class BatchPlan {
 public:
  BatchPlan(Geometry geometry, std::vector<int64_t> order);

  const Geometry& geometry() const { return geometry_; }
  // The dataset index at `position` (0-based, < samples_per_rank) of `rank`'s stream.
  int64_t sample_index(uint64_t rank, uint64_t position) const;
  std::vector<int64_t> batch_indices(uint64_t rank, uint64_t batch_index) const;
  // The rank and position that receive DistributedSampler's padding entry `k` (< padded_samples).
  int64_t padded_sample(uint64_t k, uint64_t* rank) const;
  // Entry `slot` of the sampler's list before it is dealt to ranks (padding tiles the order).
  int64_t slot_sample(uint64_t slot) const { return order_at(slot); }

 private:
  int64_t order_at(uint64_t i) const;
  Geometry geometry_;
  std::vector<int64_t> order_;
};

// The batch sizes the configured loader delivers (the same on every rank), largest first.
std::vector<uint64_t> produced_sizes(const Geometry& g);
// The smallest dataset at least as large as this one whose loader ends on a batch of `size`.
uint64_t dataset_size_for_tail(const Geometry& g, uint64_t size);

// loader.order_rank (g.spec.share) checked against the recorded order and the dataset: its
// share's size is one a DistributedSampler gives (N/W rounded down with drop_last, else up) and
// the order delivers no more than it. Throws InputError naming `config_file`'s loader.order_rank.
void check_rank_share(const Geometry& g, const std::string& config_file);
// Whether a recorded rank share's arithmetic proves the samples its order lacks (`missing`) the
// other ranks': there are other ranks, and they hold at least that many.
bool share_covers(const LoaderConfig::RankShare& r, uint64_t samples, uint64_t missing);

}  // namespace batchcheck
