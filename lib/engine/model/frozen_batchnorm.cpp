#include "engine/model/frozen_batchnorm.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <optional>
#include <string>

#include "engine/localize/localize_sites.h"

namespace batchcheck {

namespace jit = torch::jit;

std::optional<FrozenFlag> frozen_training_flag(const jit::Node* n) {
  // aten::batch_norm(input, weight, bias, running_mean, running_var, training, ...);
  // aten::*dropout(input, p, train).
  const std::string kind = n->kind().toQualString();
  const bool batch_norm = kind == "aten::batch_norm";
  if (!batch_norm && kind != "aten::dropout" && kind != "aten::feature_dropout" && kind != "aten::alpha_dropout" &&
      kind != "aten::feature_alpha_dropout") {
    return std::nullopt;
  }
  const std::size_t arg = batch_norm ? 5 : 2;
  if (n->inputs().size() <= arg) return std::nullopt;
  const c10::optional<c10::IValue> flag = jit::toIValue(n->input(arg));
  if (!flag || !flag->isBool()) return std::nullopt;  // computed from self.training: follows model.train()
  return FrozenFlag{batch_norm, flag->toBool()};
}

struct FrozenBatchNormCheck::Impl {
  std::shared_ptr<jit::Graph> graph;
  std::unique_ptr<jit::Code> code;
  std::vector<std::string> modules;  // per profiling node, the BatchNorm's module path
  std::vector<BatchNormSite> seen;   // this run's

  explicit Impl(const std::shared_ptr<jit::Graph>& forward) {
    graph = forward->copy();
    jit::Inline(*graph);
    instrument(graph->block());
    code = std::make_unique<jit::Code>(graph, "batchcheck_frozen_batchnorm");
  }

  void instrument(jit::Block* block) {
    for (jit::Node* n : block->nodes()) {
      for (jit::Block* b : n->blocks()) instrument(b);
      const std::optional<FrozenFlag> flag = frozen_training_flag(n);
      if (!flag || !flag->batch_norm || flag->training) continue;
      auto* p = new jit::ProfileIValueOp(graph.get(), nullptr);
      p->addInput(n->input(0));
      p->insertBefore(n);
      const std::size_t k = modules.size();
      modules.push_back(module_path(n));
      p->setCallback([this, k](std::vector<c10::IValue>& stack) { on_site(k, stack); });
    }
  }

  // The interpreter pushes the profiled value, then the frame id.
  void on_site(std::size_t k, std::vector<c10::IValue>& stack) {
    stack.pop_back();
    const c10::IValue v = stack.back();
    stack.pop_back();
    if (!v.isTensor()) return;
    const at::Tensor& t = v.toTensor();
    if (t.dim() < 2) return;
    int64_t values = t.size(0);
    for (int64_t d = 2; d < t.dim(); ++d) values *= t.size(d);
    if (values == 1) seen.push_back({modules[k].empty() ? "<root>" : modules[k], t.sizes().vec()});
  }
};

FrozenBatchNormCheck::FrozenBatchNormCheck(const std::shared_ptr<jit::Graph>& forward)
    : impl_(std::make_unique<Impl>(forward)) {}
FrozenBatchNormCheck::~FrozenBatchNormCheck() = default;

std::vector<BatchNormSite> FrozenBatchNormCheck::run(std::vector<c10::IValue> stack) {
  impl_->seen.clear();
  jit::InterpreterState state(*impl_->code);
  state.run(stack);
  return std::move(impl_->seen);
}

}  // namespace batchcheck
