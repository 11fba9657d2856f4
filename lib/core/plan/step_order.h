#pragma once
// Which steps a replay takes (its ranks and batches), and in what order: in turn, or
// (--fail-fast) every rank's first and last batch first, where tails, shape errors and BatchNorm
// on one sample live, then the rest in turn. Steps are numbered rank by rank (core/scan/replay.h).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <vector>

namespace batchcheck {

// The DDP ranks a replay takes: all of `world_size`, or --rank's only (InputError("", "--rank")
// when it does not exist). A recorded rank share (loader.order_rank, `share_rank`) is the
// order's one rank, index 0, which --rank names by the share's own rank.
std::vector<uint64_t> replay_ranks(uint64_t world_size, std::optional<uint64_t> rank,
                                   std::optional<uint64_t> share_rank = std::nullopt);
// The batches it takes of each rank: all, checks.max_batches' first (0: all), or --edges'
// first and last.
std::vector<uint64_t> replay_batches(uint64_t batches_per_rank, bool edges, uint64_t max_batches);

class StepOrder {
 public:
  struct Cursor {
    std::size_t head = 0;
    uint64_t rest = 0;
  };
  // `runs`: whether this process runs a step (its shard, a resumed replay's skips).
  StepOrder(uint64_t ranks, uint64_t per_rank, bool edges_first, std::function<bool(uint64_t)> runs);
  // Where a replay resumed at `from` starts (steps below it ended; `runs` says so too).
  Cursor start(uint64_t from) const { return Cursor{0, from}; }
  // The step to run after `c`, which moves past it; nullopt at the end.
  std::optional<uint64_t> next(Cursor& c) const;

 private:
  uint64_t total_;
  std::vector<uint64_t> head_;
  std::set<uint64_t> in_head_;
  std::function<bool(uint64_t)> runs_;
};

}  // namespace batchcheck
