#include "engine/permutation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/errors.h"

namespace batchcheck {

std::vector<int64_t> sampler_order(const LoaderSpec& spec) {
  if (!spec.shuffle || spec.samples == 0) return {};
  if (spec.samples > static_cast<uint64_t>(INT64_MAX)) throw InternalError("sampler_order: dataset too large");
  const auto n = static_cast<int64_t>(spec.samples);
  at::Tensor perm;
  if (spec.world_size > 1) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(spec.seed + spec.epoch);
    perm = at::randperm(n, gen, at::kLong);
  } else {
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
