#include "engine/localize/localize.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <cmath>
#include <unordered_map>

#include "core/findings/error_text.h"
#include "engine/checks/half_watch.h"
#include "engine/checks/tensor_checks.h"
#include "engine/localize/localize_sites.h"

namespace batchcheck {

namespace jit = torch::jit;

namespace {

constexpr std::size_t kChainShown = 5;

// The input index of a cast's constant dtype argument and that dtype (aten::to, aten::_to_copy),
// or nullopt for any other node or a dtype computed at run time.
std::optional<std::pair<std::size_t, at::ScalarType>> cast_dtype(const jit::Node* n) {
  if (n->kind() != c10::aten::to && n->kind() != c10::aten::_to_copy) return std::nullopt;
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (!schema) return std::nullopt;
  for (std::size_t a = 0; a < schema->arguments().size() && a < n->inputs().size(); ++a) {
    if (schema->arguments()[a].name() != "dtype") continue;
    std::optional<c10::IValue> c = jit::toIValue(n->input(a));
    if (c && c->isInt()) return std::make_pair(a, static_cast<at::ScalarType>(c->toInt()));
  }
  return std::nullopt;
}

bool is_tensor(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

// The smallest and largest value of an op's output in one pass, on the op's device (the check
// kernel reads host memory: copying every op's output there would cost more than the op); NaN
// propagates into both.
bool min_max(const at::Tensor& t, double& lo, double& hi) {
  at::Tensor d = t.detach();
  try {
    auto mm = at::aminmax(d);
    lo = std::get<0>(mm).item<double>();
    hi = std::get<1>(mm).item<double>();
  } catch (const std::exception&) {
    auto mm = at::aminmax(d.to(at::kFloat));
    lo = std::get<0>(mm).item<double>();
    hi = std::get<1>(mm).item<double>();
  }
  return std::isfinite(lo) && std::isfinite(hi);
}

bool usable(const at::Tensor& t) { return t.defined() && t.is_floating_point() && t.numel() > 0; }

// A tensor's statistics for the report, from the check kernel (the one place values are
// counted): one pass against the request's band, then two for signs and |x| > 1. Cold: it
// runs once per localized finding.
TensorSummary summarize(const at::Tensor& t, const std::string& name, std::optional<double> lo, std::optional<double> hi) {
  TensorSummary s;
  s.name = name;
  s.shape = t.sizes().vec();
  s.elements = static_cast<uint64_t>(t.numel());
  if (!t.defined() || t.numel() == 0) return s;
  const at::Tensor k = for_kernel(t.detach());
  auto pass = [&k](std::optional<double> below, std::optional<double> above) {
    ValueRule rule;
    rule.lo = below;
    rule.hi = above;
    return check_tensor(k, rule);
  };
  const ValueStats band = pass(lo, hi);
  s.nan = band.nan;
  // The kernel counts Inf without its sign; telling them apart is needed only when there are some.
  if (band.inf) s.pos_inf = static_cast<uint64_t>(at::isposinf(k).sum().item<int64_t>());
  s.neg_inf = band.inf - s.pos_inf;
  const uint64_t finite = s.elements - band.nan - band.inf;
  if (finite == 0) return s;
  s.min = band.min;
  s.max = band.max;
  if (lo) s.below = band.below;
  if (hi) s.above = band.above;
  const ValueStats sign = pass(0.0, 0.0);  // below: x < 0, above: x > 0
  s.negative = sign.below;
  s.zero = finite - sign.below - sign.above;
  const ValueStats unit = pass(-1.0, 1.0);
  s.outside_unit = unit.below + unit.above;
  return s;
}

}  // namespace

struct ForwardLocalizer::Impl {
  // One profiling node: the tensor values it sees, after `node` ran (or, `pre`, before a
  // node that writes into its inputs, so their values before it are kept).
  struct Site {
    jit::Node* node = nullptr;
    std::vector<jit::Value*> outs, ins;
    bool pre = false;
  };
  struct ValueState {
    double min = 0, max = 0;
    bool finite = true;
    const void* impl = nullptr;  // the tensor it held last, to find the prediction
    uint64_t seq = 0;
  };

  std::shared_ptr<jit::Graph> graph;
  std::unique_ptr<jit::Code> code;
  std::vector<Site> sites;

  // The state of one run.
  LocalizeRequest req;
  std::unordered_map<const jit::Value*, ValueState> values;
  uint64_t seq = 0;
  // The first NaN and the first Inf apart: a NaN is often an Inf's child (inf - inf, a
  // softmax over -inf), and the prediction says which one the finding is about.
  bool found_nan = false, found_inf = false;
  Localization first_nan, first_inf;
  jit::Node* pre_node = nullptr;
  std::unordered_map<const jit::Value*, at::Tensor> pre_values;

  // Half precision (ForwardLocalizer::ValueKey): executions of each site in this run, the
  // first non-finite value's place, the peak's, and the value asked for at a place.
  using Key = ForwardLocalizer::ValueKey;
  std::vector<uint64_t> visits;
  // Half-precision outputs that went non-finite from finite arguments, in the order they were
  // made: overflows, or a NaN the op made itself (log(0)); the float32 run tells them apart.
  static constexpr std::size_t kCandidates = 8;
  std::vector<std::pair<Key, Localization>> candidates;
  std::optional<Key> peak_key;
  Localization peak_l;
  std::vector<Key> probes;
  std::vector<std::optional<double>> probe_values;

  explicit Impl(const std::shared_ptr<jit::Graph>& forward, bool strip_half_casts = false) {
    graph = forward->copy();
    jit::Inline(*graph);
    if (strip_half_casts) strip_casts(graph->block());
    Site inputs;
    inputs.node = graph->param_node();
    for (jit::Value* v : graph->inputs()) {
      if (is_tensor(v->type())) inputs.outs.push_back(v);
    }
    if (!inputs.outs.empty()) {
      auto* p = new jit::ProfileIValueOp(graph.get(), nullptr);
      for (jit::Value* v : inputs.outs) p->addInput(v);
      graph->block()->prependNode(p);
      add_site(p, std::move(inputs));
    }
    instrument(graph->block());
    code = std::make_unique<jit::Code>(graph, "batchcheck_localize");
  }

  // aten::to(x, torch.float16) becomes aten::to(x, torch.float32): a constant dtype argument
  // only, so the ops (and the profiling sites) stay as they are.
  void strip_casts(jit::Block* block) {
    for (jit::Node* n : block->nodes()) {
      for (jit::Block* b : n->blocks()) strip_casts(b);
      const auto cast = cast_dtype(n);
      if (!cast || (cast->second != at::kHalf && cast->second != at::kBFloat16)) continue;
      jit::WithInsertPoint guard(n);
      n->replaceInput(cast->first, graph->insertConstant(static_cast<int64_t>(at::kFloat)));
    }
  }

  void add_site(jit::ProfileIValueOp* p, Site site) {
    const std::size_t k = sites.size();
    sites.push_back(std::move(site));
    p->setCallback([this, k](std::vector<c10::IValue>& stack) { on_site(k, stack); });
  }

  void instrument(jit::Block* block) {
    for (auto it = block->nodes().begin(); it != block->nodes().end();) {
      jit::Node* n = *it;
      ++it;  // past what gets inserted after n
      for (jit::Block* b : n->blocks()) instrument(b);
      Site site;
      site.node = n;
      for (jit::Value* o : n->outputs()) {
        if (is_tensor(o->type())) site.outs.push_back(o);
      }
      if (site.outs.empty()) continue;
      if (n->blocks().empty()) {
        for (jit::Value* i : n->inputs()) {
          if (is_tensor(i->type())) site.ins.push_back(i);
        }
      }
      if (const c10::FunctionSchema* schema = n->maybeSchema()) {
        Site pre;
        pre.node = n;
        pre.pre = true;
        const auto& args = schema->arguments();
        for (std::size_t a = 0; a < args.size() && a < n->inputs().size(); ++a) {
          if (args[a].alias_info() && args[a].alias_info()->isWrite() && is_tensor(n->input(a)->type())) {
            pre.ins.push_back(n->input(a));
          }
        }
        if (!pre.ins.empty()) {
          auto* p = new jit::ProfileIValueOp(graph.get(), nullptr);
          for (jit::Value* v : pre.ins) p->addInput(v);
          p->insertBefore(n);
          add_site(p, std::move(pre));
        }
      }
      auto* p = new jit::ProfileIValueOp(graph.get(), nullptr);
      for (jit::Value* v : site.outs) p->addInput(v);
      for (jit::Value* v : site.ins) p->addInput(v);
      p->insertAfter(n);
      add_site(p, std::move(site));
    }
  }

  // The interpreter pushes the profiled values, then the frame id.
  void on_site(std::size_t k, std::vector<c10::IValue>& stack) {
    stack.pop_back();
    const Site& site = sites[k];
    const std::size_t n = site.outs.size() + site.ins.size();
    const std::size_t base = stack.size() - n;
    if (site.pre) {
      if (!found_nan) {
        pre_node = site.node;
        pre_values.clear();
        for (std::size_t i = 0; i < site.ins.size(); ++i) {
          const c10::IValue& v = stack[base + i];
          if (v.isTensor() && usable(v.toTensor())) pre_values[site.ins[i]] = v.toTensor().detach().clone();
        }
      }
      stack.resize(base);
      return;
    }
    bool after_nan = false, after_inf = false;
    if (visits.size() < sites.size()) visits.resize(sites.size(), 0);
    const uint64_t visit = visits[k]++;
    // Memory no op wrote (empty_like): no value, so an op reading it (x * mask after the mask's
    // bernoulli_, which the graph does not re-bind) does not count it as a non-finite argument.
    const bool undefined = undefined_values(site.node->kind().toQualString());
    for (std::size_t i = 0; i < site.outs.size(); ++i) {
      const c10::IValue& v = stack[base + i];
      if (!v.isTensor() || !usable(v.toTensor())) continue;
      if (undefined) {
        values.erase(site.outs[i]);
        continue;
      }
      const at::Tensor& t = v.toTensor();
      ValueState st;
      st.finite = min_max(t, st.min, st.max);
      st.impl = t.unsafeGetTensorImpl();
      st.seq = ++seq;
      values[site.outs[i]] = st;
      const Key key{k, i, visit};
      for (std::size_t p = 0; p < probes.size(); ++p) {
        if (probes[p].site == k && probes[p].out == i && probes[p].visit == visit && st.finite) {
          probe_values[p] = std::max(std::fabs(st.min), std::fabs(st.max));
        }
      }
      if (req.peak && st.finite && is_half(t) && site.node->kind() != c10::prim::Param &&
          site.node->kind() != c10::prim::GetAttr) {
        const double m = std::max(std::fabs(st.min), std::fabs(st.max));
        if (!peak_l.peak || m > *peak_l.peak) record_peak(site, key, t, m);
      }
      if (st.finite || !req.nonfinite) continue;
      if (candidates.size() < kCandidates && is_half(t) && site.node->kind() != c10::prim::Param &&
          site.node->kind() != c10::prim::GetAttr && arguments_finite(site)) {
        Localization c;
        record_first(c, site, i, stack, base);
        candidates.emplace_back(key, std::move(c));
      }
      const bool nan = std::isnan(st.min) || std::isnan(st.max);
      if (nan && !found_nan) {
        found_nan = true;
        record_first(first_nan, site, i, stack, base);
      } else if (!nan && !found_inf) {
        found_inf = true;
        record_first(first_inf, site, i, stack, base);
      } else {
        after_nan = after_nan || found_nan;
        after_inf = after_inf || found_inf;
      }
    }
    for (auto [after, l] : {std::make_pair(after_nan, &first_nan), std::make_pair(after_inf, &first_inf)}) {
      if (!after) continue;
      ++l->chain_total;
      if (l->chain.size() < kChainShown) l->chain.push_back(op_site(site.node));
    }
    stack.resize(base);
  }

  // Every tensor argument finite as it was made (an in-place op's before it wrote: its value
  // was recorded where it was made), and no constant argument NaN/Inf (masked_fill's -inf).
  bool arguments_finite(const Site& site) const {
    for (const jit::Value* in : site.ins) {
      auto it = values.find(in);
      if (it != values.end() && !it->second.finite) return false;
    }
    for (const jit::Value* in : site.node->inputs()) {
      if (in->node()->kind() != c10::prim::Constant) continue;
      const std::optional<c10::IValue> c = jit::toIValue(in);
      if (c && c->isDouble() && !std::isfinite(c->toDouble())) return false;
    }
    return true;
  }

  static bool is_half(const at::Tensor& t) { return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16; }
  // Python's names: "float16", "bfloat16", "float32".
  static std::string dtype_text(const at::Tensor& t) {
    switch (t.scalar_type()) {
      case at::kHalf: return "float16";
      case at::kBFloat16: return "bfloat16";
      case at::kFloat: return "float32";
      case at::kDouble: return "float64";
      default: return c10::toString(t.scalar_type());
    }
  }

  // The rows of a batch-first tensor that hold `pick` (a mask of its elements).
  void rows_of(const at::Tensor& t, const at::Tensor& pick, std::vector<uint64_t>& rows) const {
    if (req.batch <= 1 || t.dim() == 0 || static_cast<uint64_t>(t.size(0)) != req.batch) return;
    at::Tensor r = pick.reshape({t.size(0), -1}).any(1).nonzero().flatten().to(at::kCPU);
    for (int64_t i = 0; i < r.numel(); ++i) rows.push_back(static_cast<uint64_t>(r[i].item<int64_t>()));
  }

  void record_peak(const Site& site, const Key& key, const at::Tensor& t, double m) {
    peak_key = key;
    peak_l = Localization{};
    peak_l.origin = "op";
    peak_l.kind = "peak";
    peak_l.site = op_site(site.node);
    peak_l.peak = m;
    peak_l.dtype = dtype_text(t);
    const at::Tensor d = t.detach();
    rows_of(d, d.abs() >= m, peak_l.origin_rows);
  }

  void record_first(Localization& first, const Site& site, std::size_t out, const std::vector<c10::IValue>& stack,
                    std::size_t base) {
    first.seq = seq;
    jit::Node* n = site.node;
    first.kind = "nonfinite";
    const at::Tensor& bad = stack[base + out].toTensor();
    first.dtype = dtype_text(bad);
    first.output = summarize(bad, "output", std::nullopt, std::nullopt);
    if (req.batch > 1 && bad.dim() > 0 && static_cast<uint64_t>(bad.size(0)) == req.batch) {
      at::Tensor rows = at::logical_not(at::isfinite(bad.detach().reshape({bad.size(0), -1}))).any(1).nonzero().flatten().to(at::kCPU);
      for (int64_t i = 0; i < rows.numel(); ++i) first.origin_rows.push_back(static_cast<uint64_t>(rows[i].item<int64_t>()));
    }
    if (n->kind() == c10::prim::Param) {
      first.origin = "input";
      first.name = argument_name(site.outs[out]);
      first.output.name = first.name;
      return;
    }
    if (n->kind() == c10::prim::GetAttr) {
      first.origin = "parameter";
      first.site.module = module_path(n);
      first.name = (first.site.module.empty() ? "" : first.site.module + ".") + n->s(c10::attr::name);
      first.output.name = first.name;
      return;
    }
    first.origin = "op";
    first.site = op_site(n);
    const c10::FunctionSchema* schema = n->maybeSchema();
    for (std::size_t i = 0; i < site.ins.size(); ++i) {
      jit::Value* in = site.ins[i];
      std::string name = "input " + std::to_string(i);
      if (schema) {
        for (std::size_t a = 0; a < n->inputs().size() && a < schema->arguments().size(); ++a) {
          if (n->input(a) == in) {
            name = schema->arguments()[a].name();
            break;
          }
        }
      }
      at::Tensor t;
      auto kept = pre_node == n ? pre_values.find(in) : pre_values.end();
      if (kept != pre_values.end()) {
        t = kept->second;
      } else {
        const c10::IValue& v = stack[base + site.outs.size() + i];
        if (v.isTensor()) t = v.toTensor();
      }
      if (t.defined()) first.inputs.push_back(summarize(t, name, std::nullopt, std::nullopt));
    }
  }

  bool in_band(const ValueState& s) const {
    return s.finite && (!req.lo || s.min >= *req.lo) && (!req.hi || s.max <= *req.hi);
  }

  // Walks back from the prediction along its first computed input while that is still out
  // of the band: the op whose own input was within it is the one that took the value out.
  Localization range_origin(const at::Tensor& prediction) const {
    Localization l;
    l.kind = "range";
    l.lo = req.lo;
    l.hi = req.hi;
    if (!prediction.defined()) return l;
    const jit::Value* v = nullptr;
    uint64_t latest = 0;
    for (const auto& [value, st] : values) {
      if (st.impl == prediction.unsafeGetTensorImpl() && st.seq >= latest) {
        v = value;
        latest = st.seq;
      }
    }
    if (!v) return l;
    l.output = summarize(prediction, "prediction", req.lo, req.hi);
    for (int guard = 0; guard < 100000; ++guard) {
      const jit::Node* n = v->node();
      if (n->kind() == c10::prim::Param) {
        l.origin = "input";
        l.name = argument_name(v);
        return l;
      }
      const jit::Value* main = nullptr;
      for (const jit::Value* in : n->inputs()) {
        if (values.count(in) && in->node()->kind() != c10::prim::GetAttr) {
          main = in;
          break;
        }
      }
      if (!main || in_band(values.at(main))) {
        l.origin = "op";
        l.site = op_site(n);
        if (main) {
          TensorSummary s;
          s.name = "input";
          s.min = values.at(main).min;
          s.max = values.at(main).max;
          l.inputs.push_back(s);
        }
        const ValueState& own = values.at(v);
        l.output.min = own.min;
        l.output.max = own.max;
        return l;
      }
      v = main;
    }
    return l;
  }
};

ForwardLocalizer::ForwardLocalizer(const std::shared_ptr<jit::Graph>& forward, bool strip_half_casts)
    : impl_(std::make_unique<Impl>(forward, strip_half_casts)) {}
ForwardLocalizer::~ForwardLocalizer() = default;

const std::vector<std::pair<ForwardLocalizer::ValueKey, Localization>>& ForwardLocalizer::half_candidates() const {
  return impl_->candidates;
}

std::optional<std::pair<ForwardLocalizer::ValueKey, Localization>> ForwardLocalizer::peak() const {
  const Impl& m = *impl_;
  if (!m.peak_key) return std::nullopt;
  return std::make_pair(*m.peak_key, m.peak_l);
}

std::vector<std::optional<double>> ForwardLocalizer::values_at(std::vector<c10::IValue> stack, const std::vector<ValueKey>& keys) {
  Impl& m = *impl_;
  m.probes = keys;
  m.probe_values.assign(keys.size(), std::nullopt);
  LocalizeRequest req;
  try {
    run(std::move(stack), req);
  } catch (const std::exception&) {
    // Raised after the values were read, or before: what was read stands.
  }
  m.probes.clear();
  return m.probe_values;
}

c10::IValue ForwardLocalizer::run(std::vector<c10::IValue> stack, const LocalizeRequest& req) {
  Impl& m = *impl_;
  m.req = req;
  m.values.clear();
  m.visits.assign(m.sites.size(), 0);
  m.candidates.clear();
  m.peak_key.reset();
  m.peak_l = Localization{};
  m.seq = 0;
  m.found_nan = m.found_inf = false;
  m.first_nan = m.first_inf = Localization{};
  m.pre_node = nullptr;
  m.pre_values.clear();
  jit::InterpreterState state(*m.code);
  try {
    state.run(stack);
  } catch (const std::exception&) {
    m.pre_values.clear();
    // An op after the first NaN or Inf raised on it (BCE on a NaN): what was seen stands.
    if (req.nonfinite && (m.found_nan || m.found_inf)) return c10::IValue();
    throw;
  }
  m.pre_values.clear();
  return stack.empty() ? c10::IValue() : stack.back();
}

Localization ForwardLocalizer::result(const at::Tensor& prediction, const LocalizeRequest& req) const {
  const Impl& m = *impl_;
  if (!req.nonfinite) return m.range_origin(prediction);
  const bool nan = !prediction.defined() || at::isnan(prediction.detach()).any().item<bool>();
  if (m.found_nan && (nan || !m.found_inf)) {
    Localization l = m.first_nan;
    if (m.found_inf && m.first_inf.seq < m.first_nan.seq && m.first_inf.origin == "op") l.inf_from = m.first_inf.site;
    return l;
  }
  Localization l = m.found_inf ? m.first_inf : Localization{};
  l.kind = "nonfinite";
  return l;
}


namespace {

bool block_casts_to(jit::Block* block, at::ScalarType dtype) {
  for (jit::Node* n : block->nodes()) {
    for (jit::Block* b : n->blocks()) {
      if (block_casts_to(b, dtype)) return true;
    }
    if (std::string(n->kind().toQualString()) == "aten::_autocast_to_reduced_precision") return true;
    const auto cast = cast_dtype(n);
    if (cast && cast->second == dtype) return true;
  }
  return false;
}

}  // namespace

bool graph_casts_to(const std::shared_ptr<torch::jit::Graph>& forward, at::ScalarType dtype) {
  std::shared_ptr<jit::Graph> g = forward->copy();
  jit::Inline(*g);
  return block_casts_to(g->block(), dtype);
}

}  // namespace batchcheck
