// model.format "eager" (model_runner.h): the model stayed in the user's Python process.
#include "core/base/errors.h"
#include "engine/model/model_runner.h"

namespace batchcheck {

namespace {

class EagerRunner : public ModelRunner {
 public:
  EagerRunner() { info_.format = "eager"; }
  c10::IValue forward(const std::vector<c10::IValue>&) override {
    throw InternalError("eager model: the forward comes with the batch, not from a runner");
  }
  const ModelInfo& info() const override { return info_; }
  const std::vector<std::pair<std::string, at::Tensor>>& parameters() const override { return none_; }
  void reset() override {}
  std::vector<std::string> nonfinite_batchnorm_stats() override { return {}; }

 private:
  ModelInfo info_;
  std::vector<std::pair<std::string, at::Tensor>> none_;
};

}  // namespace

std::unique_ptr<ModelRunner> eager_runner() { return std::make_unique<EagerRunner>(); }

}  // namespace batchcheck
