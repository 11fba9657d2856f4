#pragma once
// A batch order recorded from the user's own loader (loader.order): the dataset indices of
// every batch of every rank, in delivery order, as `[b.tolist() for b in batch_sampler]` or
// the export helper writes them. It replays what no formula can: a sampler seeded from the
// global RNG, WeightedRandomSampler, a bucketing batch sampler.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace batchcheck {

struct RecordedOrder {
  std::string display;  // the file as the user named it
  std::vector<std::vector<std::vector<int64_t>>> ranks;  // ranks[r][b] = indices of batch b
  std::optional<uint64_t> samples;                      // the dataset size it was recorded for
  uint64_t largest_batch = 0;
  uint64_t max_index = 0;
  bool ranked = false;  // written as {"ranks": [...]} (error locations say ranks[r])

  uint64_t batches_per_rank() const { return ranks.empty() ? 0 : ranks.front().size(); }
};

// The most memory a recorded order's batches may take: 2^28 sample indices (as many as the
// engine permutes for a shuffled loader, permutation.cpp) at 8 bytes each, fewer when its
// batches are small (each costs a vector and a heap block). An order is streamed into its
// batches, so this bounds what any order file costs, however large or however nested.
constexpr uint64_t kMaxOrderBytes = uint64_t{2} << 30;
// Bytes a batch costs in a RecordedOrder besides its indices: the vector (24) and the
// smallest heap block glibc hands out (32); measured, 10M batches of one take 64 bytes each.
constexpr uint64_t kOrderBatchBytes = 56;

// `[[3, 17], [5]]` (one rank's batches) or `{"samples": N, "ranks": [[[3, 17], [5]], ...]}`.
// Throws InputError naming the file and the element for anything else, an empty batch, a
// negative index, ranks with different numbers of batches (DDP would hang), more ranks than
// kMaxWorldSize, or batches past max_bytes.
RecordedOrder load_order(const std::string& display, const std::string& path, uint64_t max_bytes = kMaxOrderBytes);
RecordedOrder parse_order(const std::string& display, const std::string& text, uint64_t max_bytes = kMaxOrderBytes);

// Throws InputError when the order was recorded for another dataset (an index >= samples,
// or a different "samples").
void check_order_fits(const RecordedOrder& order, uint64_t samples);

}  // namespace batchcheck
