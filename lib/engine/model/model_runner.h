#pragma once
// The model behind the backend: a TorchScript archive (torch.jit.save) or a torch.export
// program compiled by AOTInductor (.pt2). The backend feeds batches and reads outputs; what
// differs between the two formats (train mode, autograd, BatchNorm state) stays behind this.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/findings/root_cause.h"
#include "core/pipeline/backend.h"
#include "core/pipeline/blame_stage.h"

namespace batchcheck {

// How a batch runs in half precision: torch.autocast entered with `dtype` on `device`, or
// (`recorded`) the graph's own casts, as a step traced under its torch.autocast holds them.
struct HalfRun {
  c10::DeviceType device = c10::DeviceType::CPU;
  c10::DeviceIndex index = -1;  // the model's CUDA device (its RNG)
  c10::ScalarType dtype = c10::ScalarType::Half;
  bool recorded = false;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // The batch's input fields in model.inputs order (then the targets, with loss type
  // "model"): tensors, or lists of samples (loader.collate.list). Throws what the model raises
  // (the backend turns it into a finding).
  virtual c10::IValue forward(const std::vector<c10::IValue>& inputs) = 0;
  virtual const ModelInfo& info() const = 0;
  // (qualified name, parameter) for the gradient check; empty without autograd.
  virtual const std::vector<std::pair<std::string, at::Tensor>>& parameters() const = 0;
  // The model as in the file again (buffers such as BatchNorm's running statistics).
  virtual void reset() = 0;
  // BatchNorm modules whose running statistics are no longer finite.
  virtual std::vector<std::string> nonfinite_batchnorm_stats() = 0;
  // Backend::frozen_batchnorm_single_value on these inputs (autograd off, buffers untouched:
  // a frozen BatchNorm updates none); empty where the format keeps no graph.
  virtual std::vector<BatchNormSite> frozen_batchnorm_single_value(const std::vector<c10::IValue>& /*inputs*/) {
    return {};
  }
  // Forward once more through an instrumented copy of the model (engine/localize/localize.h), with
  // autograd off; nullopt where the format keeps no graph to instrument (an AOTInductor
  // package). `prediction` selects the prediction from forward's value. Throws what the
  // model raises.
  virtual std::optional<Localization> localize(const std::vector<c10::IValue>& /*inputs*/, const LocalizeRequest& /*req*/,
                                               const std::function<at::Tensor(const c10::IValue&)>& /*prediction*/) {
    return std::nullopt;
  }
  // Whether forward's graph casts to `dtype` (the casts of a torch.autocast it was traced under);
  // nullopt where the format keeps no graph to read.
  virtual std::optional<bool> casts_to(at::ScalarType /*dtype*/) { return std::nullopt; }
  // Half precision, through the instrumented copy, autograd off: with req.nonfinite, the op
  // whose output first went non-finite, and (fp32_max) the largest |value| the same op makes
  // on a float32 run of the batch; with req.peak, the op whose half output held the largest
  // |value|. nullopt where the format keeps no graph or no op made it.
  virtual std::optional<Localization> localize_half(const std::vector<c10::IValue>& /*inputs*/, const LocalizeRequest& /*req*/,
                                                    const HalfRun& /*run*/) {
    return std::nullopt;
  }
  // loss.type "step": forward with each loss op's arguments checked where it runs
  // (engine/localize/argument_check.h); faults as they were found, `stopped` where one stopped forward
  // (then this throws). Formats without a graph run plain forward.
  virtual c10::IValue forward_step(const std::vector<c10::IValue>& inputs, uint64_t /*batch*/, std::vector<OpFault>& /*faults*/,
                                   bool& stopped) {
    stopped = false;
    return forward(inputs);
  }
  // Forward once more through a copy of the model that reads the indices ops are given
  // (engine/localize/argument_check.h), autograd off; nullopt where the format keeps no graph.
  virtual std::optional<ArgumentRun> check_arguments(const std::vector<c10::IValue>& /*inputs*/, uint64_t /*batch*/) {
    return std::nullopt;
  }
  // The buffers as they are now, and back: re-running a batch to localize a bad value must
  // not move the running statistics the next batches see.
  virtual std::vector<at::Tensor> save_buffers() { return {}; }
  virtual void restore_buffers(const std::vector<at::Tensor>& /*saved*/) {}
};

// dlopens model.libraries (custom operators register as they load). Throws InputError.
void load_operator_libraries(const ModelConfig& model);

// Both throw InputError for a file that is not a loadable model of their format.
// `fields`: what forward is fed, in order: the input fields (all of a record), then the
// targets with loss type "model"; checked against forward's schema, where `lists` says they
// come as lists of samples (loader.collate.list) and `dicts` which hold a dict per sample.
std::unique_ptr<ModelRunner> load_torchscript(const ModelConfig& model, const c10::Device& device,
                                              const std::vector<std::string>& fields, bool lists,
                                              const std::vector<bool>& dicts);
std::unique_ptr<ModelRunner> load_pt2(const ModelConfig& model, const c10::Device& device);
// model.format "eager": the forward ran in the user's process (the backend reads its output
// from the batch), so this runner holds no model: no parameters, no graph, nothing to reset.
std::unique_ptr<ModelRunner> eager_runner();

}  // namespace batchcheck
