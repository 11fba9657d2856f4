// The floor: the same batches through the same model with nothing else. Load the model,
// read each batch's rows from the .npy files (the reader batchcheck uses), forward.
// No checks, no loss, no report. Usage: bench_bare_loop CONFIG.json [--tuned] [--backward]
// --tuned applies the same allocator setting batchcheck uses, so that the ratio
// scan / bare-tuned isolates what the checks, the loss and the report cost.
// --backward is the floor of a training-mode scan: forward with autograd, the configured
// loss, loss.backward(), gradients cleared (what a training step does minus the optimizer).
// --part K/N runs every N-th batch from the K-th: N of them side by side are the ideal N
// replicas, which `scan --jobs N` is measured against.
// --batches N stops after the first N batches: with the whole run, the fixed cost (start-up,
// model load) apart from the marginal cost of a batch.
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <cinttypes>
#include <cstdio>
#include <iostream>

#include "core/base/allocator.h"
#include "core/config/config.h"
#include "core/parse/npy.h"
#include "core/plan/geometry.h"

using namespace batchcheck;

namespace {

at::Tensor loss_of(const at::Tensor& out, const at::Tensor& tgt, LossType type) {
  switch (type) {
    case LossType::Bce: return at::binary_cross_entropy(out, tgt);
    case LossType::BceWithLogits: return at::binary_cross_entropy_with_logits(out, tgt);
    case LossType::CrossEntropy: return at::cross_entropy_loss(out, tgt);
    case LossType::Nll: return at::nll_loss_nd(out, tgt);
    case LossType::L1: return at::l1_loss(out, tgt);
    case LossType::SmoothL1: return at::smooth_l1_loss(out, tgt);
    default: return at::mse_loss(out, tgt);
  }
}

at::Tensor read_batch(const NpyFile& f, const std::vector<int64_t>& idx, at::ScalarType dtype) {
  std::vector<int64_t> shape{static_cast<int64_t>(idx.size())};
  for (std::size_t i = 1; i < f.header().shape.size(); ++i) shape.push_back(static_cast<int64_t>(f.header().shape[i]));
  at::Tensor x = at::empty(shape, dtype);
  f.read_rows(idx, x.data_ptr());
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  bool tuned = false, backward = false;
  uint64_t part = 0, parts = 1, max_batches = UINT64_MAX;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tuned") tuned = true;
    else if (a == "--backward") backward = true;
    else if (a == "--batches" && i + 1 < argc && std::sscanf(argv[i + 1], "%" SCNu64, &max_batches) == 1) ++i;
    else if (a == "--part" && i + 1 < argc && std::sscanf(argv[i + 1], "%" SCNu64 "/%" SCNu64, &part, &parts) == 2 && part < parts) ++i;
    else argc = 0;
  }
  if (argc < 2) {
    std::cerr << "usage: bench_bare_loop CONFIG.json [--tuned] [--backward] [--part K/N] [--batches N]\n";
    return 2;
  }
  if (tuned) tune_allocator_for_batches();
  if (parts > 1) at::set_num_threads(std::max(1, at::get_num_threads() / static_cast<int>(parts)));  // the cores shared
  Config cfg = load_config(argv[1]);
  NpyFile inputs(cfg.data.inputs, cfg.data.inputs);
  std::unique_ptr<NpyFile> targets;
  if (backward) targets = std::make_unique<NpyFile>(cfg.data.targets, cfg.data.targets);
  const at::ScalarType target_dtype =
      cfg.loss.type == LossType::CrossEntropy || cfg.loss.type == LossType::Nll ? at::kLong : at::kFloat;
  auto module = torch::jit::load(cfg.model.path);
  module.train(cfg.model.mode == Mode::Train);
  at::AutoGradMode grad(backward);
  BatchPlan plan(compute_geometry(loader_spec(cfg.loader, inputs.samples())), {});
  double checksum = 0;
  const uint64_t batches = std::min<uint64_t>(plan.geometry().batches_per_rank, max_batches);
  for (uint64_t b = part; b < batches; b += parts) {
    std::vector<int64_t> idx = plan.batch_indices(0, b);
    at::Tensor x = read_batch(inputs, idx, at::kFloat);
    at::Tensor y = module.forward({x}).toTensor();
    if (backward) {
      at::Tensor l = loss_of(y, read_batch(*targets, idx, target_dtype), cfg.loss.type);
      l.backward();
      checksum += l.item<double>();
      for (const auto& p : module.parameters()) {
        if (p.grad().defined()) p.mutable_grad() = at::Tensor();
      }
    } else {
      checksum += y.data_ptr<float>()[0];  // keep the forward observable
    }
  }
  std::cout << checksum << "\n";
  return 0;
}
