// Google Benchmark micro-benchmarks: the fused value-check kernel against the naive
// LibTorch reductions it replaces, and factorization of hard 64-bit numbers.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include "core/pipeline/value_check.h"
#include "core/plan/factor.h"

using namespace batchcheck;

namespace {

// One P2 prediction batch: 32 x 1 x 64 x 64 in [0, 1].
at::Tensor p2_batch() { return at::rand({32, 1, 64, 64}); }

void BM_FusedCheckKernel(benchmark::State& state) {
  at::Tensor t = p2_batch();
  ValueRule r;
  r.lo = 0.0;
  r.hi = 1.0;
  for (auto _ : state) {
    ValueStats s = check_values(t.data_ptr<float>(), 32, 4096, r);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * t.numel() * 4);
}
BENCHMARK(BM_FusedCheckKernel);

void BM_NaiveTorchReductions(benchmark::State& state) {
  at::Tensor t = p2_batch();
  for (auto _ : state) {
    bool finite = at::isfinite(t).all().item<bool>();
    double mn = t.min().item<double>(), mx = t.max().item<double>();
    bool below = (t < 0).any().item<bool>(), above = (t > 1).any().item<bool>();
    benchmark::DoNotOptimize(finite);
    benchmark::DoNotOptimize(mn + mx);
    benchmark::DoNotOptimize(below || above);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * t.numel() * 4);
}
BENCHMARK(BM_NaiveTorchReductions);

void BM_Factorize(benchmark::State& state, uint64_t n) {
  for (auto _ : state) benchmark::DoNotOptimize(divisors(n));
}
BENCHMARK_CAPTURE(BM_Factorize, mersenne_2_61_minus_1, (uint64_t{1} << 61) - 1);
BENCHMARK_CAPTURE(BM_Factorize, prime_2_64_minus_59, UINT64_MAX - 58);
BENCHMARK_CAPTURE(BM_Factorize, semiprime_two_32bit_primes, 4294967291ull * 4294967279ull);
BENCHMARK_CAPTURE(BM_Factorize, max_uint64, UINT64_MAX);

}  // namespace

BENCHMARK_MAIN();
