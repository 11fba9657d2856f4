// The floor: the same batches through the same model with nothing else. Load the model,
// read each batch's rows from the .npy files (the reader batchcheck uses), forward.
// No checks, no loss, no report. Usage: bench_bare_loop CONFIG.json [--tuned]
// --tuned applies the same allocator setting batchcheck uses, so that the ratio
// scan / bare-tuned isolates what the checks, the loss and the report cost.
#include <torch/script.h>

#include <filesystem>
#include <iostream>

#include "core/allocator.h"
#include "core/config.h"
#include "core/geometry.h"
#include "core/npy.h"

using namespace batchcheck;

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: bench_bare_loop CONFIG.json [--tuned]\n";
    return 2;
  }
  if (argc == 3 && std::string(argv[2]) == "--tuned") tune_allocator_for_batches();
  Config cfg = load_config(argv[1]);
  NpyFile inputs(cfg.data.inputs, cfg.data.inputs);
  auto module = torch::jit::load(cfg.model.path);
  module.train(cfg.model.mode == Mode::Train);
  at::NoGradGuard no_grad;
  BatchPlan plan(compute_geometry(loader_spec(cfg.loader, inputs.samples())), {});
  std::vector<int64_t> shape{0};
  for (std::size_t i = 1; i < inputs.header().shape.size(); ++i) shape.push_back(static_cast<int64_t>(inputs.header().shape[i]));
  double checksum = 0;
  for (uint64_t b = 0; b < plan.geometry().batches_per_rank; ++b) {
    std::vector<int64_t> idx = plan.batch_indices(0, b);
    shape[0] = static_cast<int64_t>(idx.size());
    at::Tensor x = at::empty(shape, at::kFloat);
    inputs.read_rows(idx, x.data_ptr());
    at::Tensor y = module.forward({x}).toTensor();
    checksum += y.data_ptr<float>()[0];  // keep the forward observable
  }
  std::cout << checksum << "\n";
  return 0;
}
