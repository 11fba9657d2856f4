#pragma once
// `batchcheck suggest`: the geometry of a loader setup and the batch sizes that avoid
// a dangerous tail. Needs no model and no data.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan/geometry.h"

namespace batchcheck {

struct SuggestRequest {
  uint64_t samples = 0;
  uint64_t batch_size = 1;
  uint64_t world_size = 1;
  bool drop_last = false;
  bool sampler_drop_last = false;
  uint64_t accumulation_steps = 1;
  uint64_t min_tail = 2;
  std::size_t per_side = 3;  // how many sizes to list below and above batch_size
  // What the training step itself asks of every batch it gets (the last one too, unless
  // drop_last): a size that divides K (a queue of K, `K % batch_size == 0`), a size that is a
  // multiple of M (Mixup's even batch). Empty: no constraint.
  std::vector<uint64_t> divides, multiple_of;
};

// Why batch size `b` (a batch the loop delivers) breaks the request's constraints: "" if none.
std::string constraint_broken(const SuggestRequest& r, uint64_t b);

struct BatchSizeCandidate {
  uint64_t batch_size = 0;
  uint64_t tail = 0;                    // samples in the last batch if it is partial, else 0
  uint64_t batches = 0;                 // per rank, without drop_last
  uint64_t dropped_with_drop_last = 0;  // per epoch, all ranks together
};

struct Suggestion {
  SuggestRequest request;
  Geometry geometry;
  std::vector<uint64_t> divisors;           // of the per-rank sample count
  std::vector<BatchSizeCandidate> nearest;  // ascending by batch size
  // The requested size, or the last batch it leaves, breaks a constraint: why ("" where not).
  std::string requested_broken;
};

Suggestion suggest(const SuggestRequest& request);
// Divisors of the per-rank sample count closest to batch_size: at most `per_side` each side.
std::vector<uint64_t> nearest_divisors(const std::vector<uint64_t>& divisors, uint64_t batch_size,
                                       std::size_t per_side);
BatchSizeCandidate candidate(uint64_t per_rank_samples, uint64_t world_size, uint64_t batch_size);

nlohmann::ordered_json to_json(const Suggestion& s);
std::string format_table(const Suggestion& s);

}  // namespace batchcheck
