#include "engine/data/permutation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/base/errors.h"
#include "core/base/int128.h"

namespace batchcheck {

// Replaying epoch E of a single-process shuffled loader draws 2E+1 permutations of N from
// PyTorch's generator; past this many permuted samples in all, refuse rather than hang.
constexpr uint64_t kMaxPermutedSamples = uint64_t{1} << 28;

std::vector<int64_t> sampler_order(const LoaderSpec& spec) {
  if (!spec.shuffle || spec.samples == 0 || spec.recorded) return {};
  if (spec.samples > static_cast<uint64_t>(INT64_MAX)) throw InternalError("sampler_order: dataset too large");
  const auto n = static_cast<int64_t>(spec.samples);
  at::Tensor perm;
  if (spec.uses_distributed_sampler()) {
    // Python ints: a negative seed plus the epoch; the config refused an overflow.
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(spec.seed + spec.epoch);
    perm = at::randperm(n, gen, at::kLong);
  } else {
    const uint128 work = static_cast<uint128>(spec.epoch) * 2 * spec.samples;  // the epochs before this one
    if (work > kMaxPermutedSamples) {
      const uint64_t max_epoch = kMaxPermutedSamples / (2 * spec.samples);
      throw InputError("", "loader.epoch",
                       "epoch " + std::to_string(spec.epoch) + " of a shuffled DataLoader means replaying " +
                           (spec.epoch > UINT64_MAX / 2 ? std::string("2^65") : std::to_string(spec.epoch * 2)) +
                           " earlier permutations of " + std::to_string(spec.samples) +
                           " samples from PyTorch's generator; batchcheck replays at most 2^28 earlier permuted samples (epoch <= " +
                           std::to_string(max_epoch) + " here). A loader rebuilt each epoch, or resumed from a "
                           "checkpoint, starts again at epoch 0");
    }
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(spec.seed);
    for (uint64_t e = 0; e <= spec.epoch; ++e) {
      // _BaseDataLoaderIter.__init__: torch.empty((), dtype=torch.int64).random_(generator=g)
      at::empty({}, at::kLong).random_(gen);
      perm = at::randperm(n, gen, at::kLong);
      // RandomSampler.__iter__ ends with `randperm(n)[:num_samples % n]`, which still
      // advances the generator when an epoch runs to completion.
      if (e < spec.epoch) at::randperm(n, gen, at::kLong);
    }
  }
  perm = perm.contiguous();
  const int64_t* p = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

BatchPlan make_batch_plan(const LoaderSpec& spec) {
  return BatchPlan(compute_geometry(spec), sampler_order(spec));
}

}  // namespace batchcheck
