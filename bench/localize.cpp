// Root-cause localization's cost (issue 13, part 6): one failing batch localized against the
// same batch's plain forward, on the seed sample's model (a conv net with a standardization
// over the batch, 3 x 64 x 64 images). The failing batch is the seed's tail of one sample;
// the batch of 8 holds one NaN sample that the batch statistic spreads to all rows, so its
// localization includes the halving. LibTorch warns about the std of one sample on each
// run: run it with 2>/dev/null.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <benchmark/benchmark.h>

#include <string>

#include "core/config/config.h"
#include "engine/fixtures.h"
#include "engine/localize/localize.h"
#include "engine/model/localize_batch.h"
#include "engine/model/model_runner.h"

using namespace batchcheck;

namespace {

std::unique_ptr<ModelRunner> seed_model(Config& cfg) {
  static const std::string dir = "bench-data/localize";
  static bool made = false;
  if (!made) {
    generate_samples(dir);
    made = true;
  }
  cfg.model.path = dir + "/seg_model.pt";
  cfg.model.mode = Mode::Train;
  return load_torchscript(cfg.model, c10::Device(c10::kCPU), {"inputs"}, false, {false});
}

at::Tensor batch_of(int64_t n, bool nan_sample) {
  at::Tensor x = at::rand({n, 3, 64, 64}, at::TensorOptions().dtype(at::kFloat));
  if (nan_sample) x[n / 2][0][5][5] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

void BM_PlainForward(benchmark::State& state) {
  Config cfg;
  auto model = seed_model(cfg);
  const std::vector<c10::IValue> args{batch_of(state.range(0), state.range(0) > 1)};
  at::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(model->forward(args));
}

void BM_Localize(benchmark::State& state) {
  Config cfg;
  auto model = seed_model(cfg);
  const int64_t n = state.range(0);
  const std::vector<c10::IValue> args{batch_of(n, n > 1)};
  LocalizeRequest req;
  req.nonfinite = true;
  req.halve = state.range(1) != 0;
  uint64_t forwards = 0;
  for (auto _ : state) {
    auto l = localize_batch(*model, cfg, args, static_cast<uint64_t>(n), req);
    if (!l || l->origin.empty()) state.SkipWithError("nothing localized");
    forwards = l ? l->forwards : 0;
  }
  state.counters["forwards"] = static_cast<double>(forwards);
}

}  // namespace

BENCHMARK(BM_PlainForward)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond);
// (batch, halving): the instrumented forward alone, then with the halving.
BENCHMARK(BM_Localize)->Args({1, 0})->Args({8, 0})->Args({8, 1})->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
