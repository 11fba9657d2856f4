#include "core/plan/step_order.h"

#include <algorithm>
#include <string>

#include "core/base/errors.h"

namespace batchcheck {

std::vector<uint64_t> replay_ranks(uint64_t world_size, std::optional<uint64_t> rank, std::optional<uint64_t> share_rank) {
  if (share_rank) {
    if (rank && *rank != *share_rank) {
      throw InputError("", "--rank", "rank " + std::to_string(*rank) + " is not in the recorded order: it holds rank " +
                                         std::to_string(*share_rank) + "'s share (loader.order_rank); use --rank " +
                                         std::to_string(*share_rank) + " or leave --rank out");
    }
    return {0};
  }
  if (rank) {
    if (*rank >= world_size) {
      throw InputError("", "--rank", "rank " + std::to_string(*rank) + " does not exist with world_size " +
                                         std::to_string(world_size) + " (ranks are 0.." + std::to_string(world_size - 1) + ")");
    }
    return {*rank};
  }
  std::vector<uint64_t> ranks;
  for (uint64_t r = 0; r < world_size; ++r) ranks.push_back(r);
  return ranks;
}

std::vector<uint64_t> replay_batches(uint64_t batches_per_rank, bool edges, uint64_t max_batches) {
  std::vector<uint64_t> out;
  if (batches_per_rank == 0) return out;
  if (edges) {
    out.push_back(0);
    if (batches_per_rank > 1) out.push_back(batches_per_rank - 1);
    return out;
  }
  const uint64_t n = max_batches ? std::min(max_batches, batches_per_rank) : batches_per_rank;
  for (uint64_t b = 0; b < n; ++b) out.push_back(b);
  return out;
}

StepOrder::StepOrder(uint64_t ranks, uint64_t per_rank, bool edges_first, std::function<bool(uint64_t)> runs)
    : total_(ranks * per_rank), runs_(std::move(runs)) {
  if (edges_first && per_rank > 0) {
    for (uint64_t r = 0; r < ranks; ++r) {
      head_.push_back(r * per_rank);
      if (per_rank > 1) head_.push_back(r * per_rank + per_rank - 1);
    }
  }
  in_head_.insert(head_.begin(), head_.end());
}

std::optional<uint64_t> StepOrder::next(Cursor& c) const {
  for (;;) {
    uint64_t s;
    if (c.head < head_.size()) {
      s = head_[c.head++];
    } else {
      while (c.rest < total_ && in_head_.count(c.rest)) ++c.rest;
      if (c.rest >= total_) return std::nullopt;
      s = c.rest++;
    }
    if (runs_(s)) return s;
  }
}

}  // namespace batchcheck
