#pragma once
// The sampler order of PyTorch, computed with LibTorch's own CPU generator so that it
// is bit-identical to what Python's DataLoader / DistributedSampler deliver.
#include <cstdint>
#include <vector>

#include "core/plan/geometry.h"

namespace batchcheck {

// The permutation of [0, N) the sampler iterates in epoch `spec.epoch`, or an empty
// vector when the order is sequential (no shuffle).
//  - world_size > 1: DistributedSampler: randperm(N) from a generator seeded seed + epoch.
//  - world_size == 1: DataLoader(shuffle=True, generator=torch.Generator().manual_seed(seed)).
//    Each epoch's iterator first draws its base seed from that generator, then
//    RandomSampler draws randperm(N), and once more for the empty remainder when the
//    epoch completes. Epoch e is what the (e+1)-th full pass over the loader yields.
std::vector<int64_t> sampler_order(const LoaderSpec& spec);

// Convenience: the full plan (geometry + order).
BatchPlan make_batch_plan(const LoaderSpec& spec);

}  // namespace batchcheck
