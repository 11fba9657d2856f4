#include "engine/localize/argument_check.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/scope.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <functional>
#include <tuple>

#include "core/base/text.h"
#include "core/pipeline/batch_layout.h"
#include "engine/checks/tensor_checks.h"
#include "engine/localize/localize_sites.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace jit = torch::jit;

namespace {

// What an op takes as indices, and where their bound comes from; or a loss with a range.
enum class Kind { Embedding, ClassIndex, OneHot, Bce, BceLogits, Raise, Shape };

std::optional<Kind> kind_of(const jit::Node* n) {
  const std::string op = n->kind().toQualString();
  if (op == "aten::embedding") return Kind::Embedding;
  if (op == "aten::nll_loss" || op == "aten::nll_loss_nd" || op == "aten::nll_loss2d" || op == "aten::cross_entropy_loss") {
    return Kind::ClassIndex;
  }
  if (op == "aten::one_hot") return Kind::OneHot;
  if (op == "aten::binary_cross_entropy") return Kind::Bce;
  if (op == "aten::binary_cross_entropy_with_logits") return Kind::BceLogits;
  // A raise of the model's Python (F.batch_norm's check of one value per channel): where it ran.
  if (n->kind() == c10::prim::RaiseException) return Kind::Raise;
  // A traced view/reshape whose shape is a constant list: the trace may have frozen it.
  if ((op == "aten::view" || op == "aten::reshape") && n->inputs().size() >= 2 && traced_op(n)) {
    const jit::Node* list = n->input(1)->node();
    bool constant = list->kind() == c10::prim::Constant;
    if (list->kind() == c10::prim::ListConstruct) {
      constant = true;
      for (const jit::Value* v : list->inputs()) constant = constant && v->node()->kind() == c10::prim::Constant;
    }
    if (constant) return Kind::Shape;
  }
  return std::nullopt;
}

// The class of the module an inlined node was called in ("Embedding"), where recorded.
std::string module_type(const jit::Node* n) {
  std::string type;
  if (auto cs = n->callstack()) {
    for (const auto& entry : (*cs)->vec()) {
      const auto& info = std::get<2>(entry);
      if (info && info->class_type()) type = info->class_type()->name()->name();
    }
  }
  return type;
}

// The path of a module object in the graph ("layer4.0.bn1"): the chain of prim::GetAttr from
// the graph's self; "" where the value is not reached that way.
std::string object_path(const jit::Value* v) {
  std::vector<std::string> names;
  for (int guard = 0; v->node()->kind() == c10::prim::GetAttr && guard < 64; ++guard) {
    names.push_back(v->node()->s(c10::attr::name));
    v = v->node()->input(0);
  }
  if (v->node()->kind() != c10::prim::Param || names.empty()) return "";
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += (path.empty() ? "" : ".") + *it;
  return path;
}

// The module whose own Python a raise belongs to, and its class: an archive's graph keeps no
// call stack for code inlined when it was compiled, but the raise's condition reads the
// module's flags (F.batch_norm's `if training:` reads its BatchNorm's `training`).
std::pair<std::string, std::string> raising_module(const jit::Node* raise) {
  if (std::string m = module_path(raise); !m.empty()) return {m, module_type(raise)};
  std::function<const jit::Value*(const jit::Value*, int)> attribute_owner = [&](const jit::Value* v, int depth) -> const jit::Value* {
    const jit::Node* n = v->node();
    // A flag of the module (`training`), not a tensor another module's output came from.
    if (n->kind() == c10::prim::GetAttr && n->input(0)->type()->kind() == c10::TypeKind::ClassType &&
        v->type()->kind() == c10::TypeKind::BoolType) {
      return n->input(0);
    }
    if (depth == 0) return nullptr;
    for (const jit::Value* in : n->inputs()) {
      if (const jit::Value* owner = attribute_owner(in, depth - 1)) return owner;
    }
    return nullptr;
  };
  for (const jit::Node* p = raise; p; p = p->owningBlock() ? p->owningBlock()->owningNode() : nullptr) {
    if (p->kind() != c10::prim::If || p->inputs().empty()) continue;
    if (const jit::Value* owner = attribute_owner(p->input(0), 6)) {
      std::string path = object_path(owner);
      if (path.empty()) continue;
      const auto cls = owner->type()->cast<c10::ClassType>();
      return {path, cls && cls->name() ? cls->name()->name() : ""};
    }
  }
  return {"", ""};
}

// Every tensor the run was given (the batch's fields, in tuples, lists and dicts): what an op's
// argument may be made of (core/pipeline/batch_layout.h).
void collect_tensors(const c10::IValue& v, std::vector<at::Tensor>& out, int depth = 0) {
  if (depth > 8) return;
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) collect_tensors(e, out, depth + 1);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) collect_tensors(e, out, depth + 1);
  } else if (v.isGenericDict()) {
    for (const auto& e : v.toGenericDict()) collect_tensors(e.value(), out, depth + 1);
  }
}

// The rows of the batch where `bad` (a mask over `arg`, an op's argument) holds: batch-first
// where arg's first dimension is the batch's size; else through the one layout of the fields'
// views whose values arg equals ([T, B], [B*T] flattened, tgt[1:] flattened), where every
// matching view names the same rows. Empty where none is proven: the search names them then.
std::vector<uint64_t> bad_rows(const at::Tensor& bad, const at::Tensor& arg, uint64_t batch, const std::vector<at::Tensor>& fields) {
  if (batch == 0 || bad.dim() == 0) return {};
  const at::Tensor flat = bad.detach().to(at::kCPU).flatten().nonzero().flatten().contiguous();
  std::vector<uint64_t> positions(static_cast<std::size_t>(flat.numel()));
  const auto a = flat.accessor<int64_t, 1>();
  for (int64_t i = 0; i < flat.numel(); ++i) positions[static_cast<std::size_t>(i)] = static_cast<uint64_t>(a[i]);
  if (static_cast<uint64_t>(bad.size(0)) == batch) return rows_of(BatchLayout{bad.sizes().vec(), 0}, positions);
  std::vector<std::vector<int64_t>> shapes;
  for (const at::Tensor& f : fields) shapes.push_back(f.sizes().vec());
  const at::Tensor values = arg.detach().to(at::kCPU).reshape({-1});
  std::optional<std::vector<uint64_t>> rows;
  for (const FieldView& v : field_views(static_cast<uint64_t>(arg.numel()), batch, shapes)) {
    at::Tensor f = fields[v.field].detach().to(at::kCPU);
    if (f.dim() == 2) {
      f = f.narrow(static_cast<int64_t>(1 - *batch_dim(shapes[v.field], batch)), v.offset, v.length);
      if (v.transposed) f = f.t();
    }
    const at::Tensor g = f.reshape({-1}).to(values.scalar_type());
    // Equal values, a NaN equal to a NaN (a NaN target is what is being placed).
    const bool same = at::isFloatingType(values.scalar_type())
                          ? g.eq(values).logical_or(g.isnan().logical_and(values.isnan())).all().item<bool>()
                          : at::equal(g, values);
    if (!same) continue;
    std::vector<uint64_t> r = rows_of(v.layout, positions);
    if (rows && *rows != r) return {};  // two views of the data, two answers: not known
    rows = std::move(r);
  }
  return rows ? *rows : std::vector<uint64_t>{};
}

}  // namespace

struct ArgumentCheck::Impl {
  struct Site {
    jit::Node* node = nullptr;
    Kind kind = Kind::Embedding;
    std::string module, module_type;  // a raise's module, read from the graph (raising_module)
  };
  std::shared_ptr<jit::Graph> graph;
  std::unique_ptr<jit::Code> code;
  std::vector<Site> sites;
  uint64_t batch = 0;
  std::vector<at::Tensor> fields;  // the run's tensors (collect_tensors)
  std::optional<OpFault> fault;
  std::optional<FrozenShape> last_shape;  // the last traced constant shape an op was given
  // The module whose Python raised last in this run ("" where none did).
  std::string raised_module, raised_module_type;
  // A step's run (run_step): every fault, and whether one stopped forward.
  bool step = false;
  std::vector<OpFault>* faults = nullptr;
  bool stopped = false;

  explicit Impl(const std::shared_ptr<jit::Graph>& forward) {
    graph = forward->copy();
    jit::Inline(*graph);
    instrument(graph->block());
    code = std::make_unique<jit::Code>(graph, "batchcheck_arguments");
  }

  void instrument(jit::Block* block) {
    for (auto it = block->nodes().begin(); it != block->nodes().end(); ++it) {
      jit::Node* n = *it;
      for (jit::Block* b : n->blocks()) instrument(b);
      const std::optional<Kind> kind = kind_of(n);
      if (!kind) continue;
      auto* p = new jit::ProfileIValueOp(graph.get(), nullptr);
      for (jit::Value* v : n->inputs()) p->addInput(v);
      p->insertBefore(n);
      const std::size_t k = sites.size();
      Site site{n, *kind, "", ""};
      if (*kind == Kind::Raise) std::tie(site.module, site.module_type) = raising_module(n);
      sites.push_back(std::move(site));
      p->setCallback([this, k](std::vector<c10::IValue>& stack) { on_site(k, stack); });
    }
  }

  // The interpreter pushes the op's inputs, then the frame id.
  void on_site(std::size_t k, std::vector<c10::IValue>& stack) {
    stack.pop_back();
    const Site& site = sites[k];
    const std::size_t n = site.node->inputs().size();
    const std::size_t base = stack.size() - n;
    const std::vector<c10::IValue> in(stack.begin() + static_cast<std::ptrdiff_t>(base), stack.end());
    stack.resize(base);
    if (site.kind == Kind::Raise) {
      raised_module = site.module;
      raised_module_type = site.module_type;
      return;
    }
    if (site.kind == Kind::Shape) {
      // The op runs next: where it raises, this is the shape it raised on.
      last_shape.reset();
      if (in.size() >= 2 && in[0].isTensor() && in[1].isIntList()) {
        last_shape = FrozenShape{op_site(site.node), in[1].toIntVector(), in[0].toTensor().sizes().vec()};
      }
      return;
    }
    if (step) {
      std::vector<OpFault> found;
      try {
        found = site.kind == Kind::Bce || site.kind == Kind::BceLogits ? check_loss(site, in) : std::vector<OpFault>{};
        if (found.empty()) {
          if (auto f = check(site, in)) found.push_back(*f);
        }
      } catch (const std::exception&) {
        return;  // an argument this does not read (an op's other overload): no fault of this site
      }
      bool fatal = false;
      for (auto& f : found) {
        fatal = fatal || f.fatal;
        faults->push_back(std::move(f));
      }
      if (fatal) {
        stopped = true;
        throw std::runtime_error("batchcheck stopped forward before " + std::string(site.node->kind().toQualString()) +
                                 ", whose arguments break its contract");
      }
      return;
    }
    if (!fault && site.kind != Kind::Bce && site.kind != Kind::BceLogits) {
      try {
        fault = check(site, in);
      } catch (const std::exception&) {
        // An argument this does not read (an op's other overload): no fault of this site.
      }
    }
  }

  // binary_cross_entropy(self, target, weight, reduction): both in [0, 1] and finite, or it
  // raises (CUDA asserts); binary_cross_entropy_with_logits(self, target, ...): a finite
  // input, a target in [0, 1], or the loss is silently wrong.
  std::vector<OpFault> check_loss(const Site& site, const std::vector<c10::IValue>& in) const {
    std::vector<OpFault> out;
    if (in.size() < 2 || !in[0].isTensor() || !in[1].isTensor()) return out;
    const bool logits = site.kind == Kind::BceLogits;
    if (in[0].toTensor().sizes() != in[1].toTensor().sizes()) {
      // F.binary_cross_entropy(_with_logits) raises ValueError on it in Python, before the op:
      // a traced step has lost that check (a .squeeze() that ate a batch of one).
      OpFault f;
      f.site = op_site(site.node);
      f.module_type = module_type(site.node);
      f.loss = logits ? "BCEWithLogitsLoss" : "BCELoss";
      f.id = "shape-mismatch";
      f.what = "input";
      f.input_shape = in[0].toTensor().sizes().vec();
      f.target_shape = in[1].toTensor().sizes().vec();
      out.push_back(std::move(f));
      return out;
    }
    for (int k = 0; k < 2; ++k) {
      const at::Tensor& t = in[k].toTensor();
      if (!at::isFloatingType(t.scalar_type()) || t.numel() == 0) continue;
      const bool ranged = !(logits && k == 0);
      // One pass of the check kernel (NaN/Inf, the band, the rows), as every other check.
      ValueRule rule;
      if (ranged) {
        rule.lo = 0.0;
        rule.hi = 1.0;
      }
      const ValueStats v = check_tensor(for_kernel(t.detach()), rule);
      if (v.ok()) continue;
      OpFault f;
      f.site = op_site(site.node);
      f.module_type = module_type(site.node);
      f.loss = logits ? "BCEWithLogitsLoss" : "BCELoss";
      f.what = k == 0 ? "input" : "target";
      f.nonfinite = v.nan + v.inf;
      f.outside = v.below + v.above;
      f.id = std::string(k == 0 ? "output" : "target") + (f.nonfinite ? "-nonfinite" : "-out-of-range");
      f.lo = 0;
      f.hi = 1;
      f.elements = static_cast<uint64_t>(t.numel());
      if (f.nonfinite < f.elements) {
        f.min = v.min;
        f.max = v.max;
      }
      // BCELoss raises on both (CUDA asserts); with logits a NaN or a target outside [0, 1]
      // computes a loss, a wrong one.
      f.fatal = !logits;
      if (t.dim() > 0 && static_cast<uint64_t>(t.size(0)) == batch) {
        f.rows = v.bad_rows;
      } else {  // [T, B] or flattened: the rows through the field it is made of
        const at::Tensor d = t.detach().to(at::kCPU).to(at::kDouble);
        at::Tensor bad = d.isfinite().logical_not();
        if (ranged) bad = bad.logical_or(d < 0).logical_or(d > 1);
        f.rows = bad_rows(bad, t, batch, fields);
      }
      out.push_back(std::move(f));
    }
    return out;
  }

  std::optional<OpFault> check(const Site& site, const std::vector<c10::IValue>& in) const {
    OpFault f;
    at::Tensor index;
    int64_t bound = 0;
    std::optional<int64_t> ignore;
    switch (site.kind) {
      case Kind::Embedding:  // embedding(weight, indices, ...)
        if (in.size() < 2 || !in[0].isTensor() || !in[1].isTensor()) return std::nullopt;
        bound = in[0].toTensor().size(0);
        index = in[1].toTensor();
        f.what = "token id";
        f.bound_name = "num_embeddings";
        break;
      case Kind::ClassIndex: {  // nll_loss*(self, target, weight, reduction, ignore_index), cross_entropy_loss(...)
        if (in.size() < 5 || !in[0].isTensor() || !in[1].isTensor()) return std::nullopt;
        const at::Tensor& input = in[0].toTensor();
        index = in[1].toTensor();
        if (at::isFloatingType(index.scalar_type())) return std::nullopt;  // class probabilities
        bound = input.dim() >= 2 ? input.size(1) : input.size(0);
        if (in[4].isInt()) ignore = in[4].toInt();
        f.what = "class index";
        f.bound_name = "classes";
        f.id = "target-out-of-range";
        break;
      }
      case Kind::OneHot:  // one_hot(self, num_classes)
        if (in.size() < 2 || !in[0].isTensor() || !in[1].isInt() || in[1].toInt() < 0) return std::nullopt;
        index = in[0].toTensor();
        bound = in[1].toInt();
        f.what = "class value";
        f.bound_name = "num_classes";
        break;
      case Kind::Bce:
      case Kind::BceLogits:
      case Kind::Raise:
      case Kind::Shape: return std::nullopt;  // check_loss, on_site
    }
    if (at::isFloatingType(index.scalar_type()) || index.numel() == 0) return std::nullopt;
    const at::Tensor i = index.detach().to(at::kCPU).to(at::kLong);
    at::Tensor bad = (i < 0).logical_or(i >= bound);
    if (ignore) bad = bad.logical_and(i != *ignore);
    if (!bad.any().item<bool>()) return std::nullopt;
    const at::Tensor values = i.masked_select(bad);
    const int64_t lo = values.min().item<int64_t>(), hi = values.max().item<int64_t>();
    f.value = lo < 0 && hi < bound ? lo : hi;
    f.bound = bound;
    f.site = op_site(site.node);
    f.module_type = module_type(site.node);
    f.rows = bad_rows(bad, i, batch, fields);
    return f;
  }
};

ArgumentCheck::ArgumentCheck(const std::shared_ptr<jit::Graph>& forward) : impl_(std::make_unique<Impl>(forward)) {}
ArgumentCheck::~ArgumentCheck() = default;

ArgumentRun ArgumentCheck::run(std::vector<c10::IValue> stack, uint64_t batch) {
  Impl& m = *impl_;
  m.batch = batch;
  m.fields.clear();
  for (const c10::IValue& v : stack) collect_tensors(v, m.fields);
  m.step = false;
  m.fault.reset();
  m.raised_module.clear();
  m.raised_module_type.clear();
  m.last_shape.reset();
  ArgumentRun r;
  try {
    at::NoGradGuard no_grad;
    jit::InterpreterState state(*m.code);
    state.run(stack);
    r.result.ok = true;
  } catch (const std::exception& e) {
    fill_error(r.result, e);
  }
  r.fault = m.fault;
  if (!r.result.ok) {
    r.raised_module = m.raised_module;
    r.raised_module_type = m.raised_module_type;
    // The frozen shape is the error's when the error names it ("shape '[28, 1]' is invalid").
    if (m.last_shape && r.result.error.find("shape '[" + join_ints(m.last_shape->shape, ", ") + "]'") != std::string::npos) {
      r.frozen = m.last_shape;
    }
  }
  return r;
}

c10::IValue ArgumentCheck::run_step(std::vector<c10::IValue> stack, uint64_t batch, std::vector<OpFault>& faults, bool& stopped) {
  Impl& m = *impl_;
  m.batch = batch;
  m.fields.clear();
  for (const c10::IValue& v : stack) collect_tensors(v, m.fields);
  m.step = true;
  m.faults = &faults;
  m.stopped = false;
  try {
    jit::InterpreterState state(*m.code);
    state.run(stack);
  } catch (...) {
    stopped = m.stopped;
    m.step = false;
    throw;
  }
  stopped = false;
  m.step = false;
  return stack.empty() ? c10::IValue() : stack.back();
}

}  // namespace batchcheck
