#include "core/step_order.h"

namespace batchcheck {

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
