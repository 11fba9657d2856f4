// TorchScript archives (torch.jit.save of a scripted or traced module): train/eval, autograd,
// BatchNorm state. The only translation unit that compiles against torch::jit.
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>

#include "core/base/errors.h"
#include "core/base/files.h"
#include "core/base/text.h"
#include "core/parse/file_kind.h"
#include "engine/compat.h"
#include "engine/cuda_runtime.h"
#include "engine/localize/argument_check.h"
#include "engine/localize/localize.h"
#include "engine/model/frozen_batchnorm.h"
#include "engine/model/model_runner.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

// An archive saved by a newer torch names operators this LibTorch lacks: say which, and what to do.
std::string newer_operator_message(const std::string& load_error) {
  const std::string marker = "Unknown builtin op: ";
  const std::size_t at = load_error.find(marker);
  if (at == std::string::npos) return "";
  std::string op;
  for (std::size_t p = at + marker.size(); p < load_error.size(); ++p) {
    const char c = load_error[p];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':' && c != '.') break;
    op += c;
  }
  while (!op.empty() && op.back() == '.') op.pop_back();  // the sentence's full stop
  if (op.empty()) return "";
  const std::string ns = op.substr(0, op.find("::"));
  if (ns != "aten" && ns != "prim" && ns != "quantized" && ns != "_caffe2") {
    // Not PyTorch's own: an operator library registers it (torchvision::nms, a user's C++ ops).
    std::string where = ns == "torchvision" ? " (torchvision's: the _C*.so in the torchvision package folder)" : "";
    return "the archive uses the operator " + op + ", which no loaded library registers: add the shared library that "
           "defines it" + where + " to model.libraries";
  }
  return "the archive uses the operator " + op + ", which the LibTorch this batchcheck links (" TORCH_VERSION
         ") does not have: it was saved by a newer torch; build batchcheck against the torch you train with "
         "(the default build, or BATCHCHECK_PYTHON=/path/to/your/python scripts/build.sh; see the README)";
}

class TorchScriptRunner : public ModelRunner {
 public:
  TorchScriptRunner(const ModelConfig& model, const c10::Device& device, const std::vector<std::string>& fields, bool lists,
                    const std::vector<bool>& dicts)
      : path_(model.path), kind_(model.inputs_kind), fields_(fields), lists_(lists), dicts_(dicts) {
    require_model_file(path_, "a TorchScript file (torch.jit.save)");
    load(device, model.mode);
    auto method = module_.find_method("forward");
    if (!method) throw InputError(path_, "", "the TorchScript module has no forward method");
    check_inputs(method->function().getSchema(), model);
    find_frozen_mode_ops(*method);
  }

  std::optional<Localization> localize(const std::vector<c10::IValue>& inputs, const LocalizeRequest& req,
                                       const std::function<at::Tensor(const c10::IValue&)>& prediction) override {
    torch::jit::Method method = module_.get_method("forward");
    localizer(torch::jit::toGraphFunction(method.function()).graph());
    at::NoGradGuard no_grad;
    c10::IValue out = localizer_->run(interpreter_stack(method, inputs), req);
    // None: forward raised after its bad value was seen (a loss op given the NaN).
    return localizer_->result(out.isNone() ? at::Tensor() : prediction(out), req);
  }

  std::optional<bool> casts_to(at::ScalarType dtype) override {
    torch::jit::Method method = module_.get_method("forward");
    return graph_casts_to(torch::jit::toGraphFunction(method.function()).graph(), dtype);
  }

  std::optional<Localization> localize_half(const std::vector<c10::IValue>& inputs, const LocalizeRequest& req,
                                            const HalfRun& run) override {
    torch::jit::Method method = module_.get_method("forward");
    const std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(method.function()).graph();
    ForwardLocalizer& half = localizer(graph);
    at::NoGradGuard no_grad;
    const std::vector<c10::IValue> stack = interpreter_stack(method, inputs);
    // Both runs draw the same dropout masks, and the batches after them the masks they would
    // have drawn without them.
    at::Generator gen = at::globalContext().defaultGenerator(at::Device(run.device, run.index));
    at::Tensor rng;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();
    }
    auto put_back = [&] {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    };
    {
      compat::AutocastScope autocast(run.device, run.dtype, !run.recorded);
      try {
        half.run(stack, req);
      } catch (const std::exception&) {  // raised past the values asked about: what was seen stands
      }
    }
    put_back();
    if (req.peak) {
      auto found = half.peak();
      return found ? std::optional<Localization>(found->second) : std::nullopt;
    }
    // The first of the ops that went non-finite whose float32 value is finite: the overflow.
    const std::vector<std::pair<ForwardLocalizer::ValueKey, Localization>> candidates = half.half_candidates();
    if (candidates.empty()) return std::nullopt;
    std::vector<ForwardLocalizer::ValueKey> keys;
    for (const auto& c : candidates) keys.push_back(c.first);
    ForwardLocalizer* fp32 = &half;
    if (run.recorded) {
      if (!fp32_localizer_) {
        compat::NoAutocast off;
        fp32_localizer_ = std::make_unique<ForwardLocalizer>(graph, true);
      }
      fp32 = fp32_localizer_.get();
    }
    std::vector<std::optional<double>> values;
    {
      compat::NoAutocast off;
      values = fp32->values_at(stack, keys);
    }
    put_back();
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      if (!values[k]) continue;
      Localization l = candidates[k].second;
      l.fp32_max = values[k];
      return l;
    }
    return std::nullopt;
  }

  // The instrumented copy, made with autocast off (compat::NoAutocast says why).
  ForwardLocalizer& localizer(const std::shared_ptr<torch::jit::Graph>& graph) {
    if (!localizer_) {
      compat::NoAutocast off;
      localizer_ = std::make_unique<ForwardLocalizer>(graph);
    }
    return *localizer_;
  }

  std::optional<ArgumentRun> check_arguments(const std::vector<c10::IValue>& inputs, uint64_t batch) override {
    torch::jit::Method method = module_.get_method("forward");
    return argument_check(method).run(interpreter_stack(method, inputs), batch);
  }

  c10::IValue forward_step(const std::vector<c10::IValue>& inputs, uint64_t batch, std::vector<OpFault>& faults,
                           bool& stopped) override {
    torch::jit::Method method = module_.get_method("forward");
    return argument_check(method).run_step(interpreter_stack(method, inputs), batch, faults, stopped);
  }

  ArgumentCheck& argument_check(const torch::jit::Method& method) {
    if (!argument_check_) {
      compat::NoAutocast off;  // made once, whatever the batch runs under
      argument_check_ = std::make_unique<ArgumentCheck>(torch::jit::toGraphFunction(method.function()).graph());
    }
    return *argument_check_;
  }

  std::vector<BatchNormSite> frozen_batchnorm_single_value(const std::vector<c10::IValue>& inputs) override {
    if (info_.frozen_eval.batch_norm == 0) return {};
    torch::jit::Method method = module_.get_method("forward");
    if (!frozen_batchnorm_) {
      compat::NoAutocast off;
      frozen_batchnorm_ = std::make_unique<FrozenBatchNormCheck>(torch::jit::toGraphFunction(method.function()).graph());
    }
    at::NoGradGuard no_grad;
    return frozen_batchnorm_->run(interpreter_stack(method, inputs));
  }

  // How forward takes the batch's fields: positionally, by name, or as one dict (a record).
  std::pair<std::vector<c10::IValue>, torch::jit::Kwargs> call_args(const std::vector<c10::IValue>& inputs) const {
    std::vector<c10::IValue> args;
    torch::jit::Kwargs kwargs;
    switch (kind_) {
      case InputsKind::Named:
        for (std::size_t k = 0; k < inputs.size(); ++k) kwargs.emplace(args_[k], inputs[k]);
        break;
      case InputsKind::Record: {
        c10::Dict<std::string, at::Tensor> record;
        for (std::size_t k = 0; k < inputs.size(); ++k) record.insert(fields_[k], inputs[k].toTensor());
        args.emplace_back(record);
        break;
      }
      case InputsKind::Single:
      case InputsKind::Positional: args = inputs; break;
    }
    return {std::move(args), std::move(kwargs)};
  }

  std::vector<at::Tensor> save_buffers() override {
    std::vector<at::Tensor> now;
    for (const auto& b : saved_buffers_) now.push_back(b.first.detach().clone());
    return now;
  }
  void restore_buffers(const std::vector<at::Tensor>& saved) override {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < saved.size() && i < saved_buffers_.size(); ++i) saved_buffers_[i].first.copy_(saved[i]);
  }

  c10::IValue forward(const std::vector<c10::IValue>& inputs) override {
    auto [args, kwargs] = call_args(inputs);
    // The graph runs op by op, as the eager model trains: the optimizing executor would swap in
    // TorchScript's own symbolic gradients (relu's as gt * mul), slower than autograd's and not
    // the formulas training runs. Per thread, so set for each call.
    torch::jit::GraphOptimizerEnabledGuard as_eager(false);
    return module_.get_method("forward")(std::move(args), kwargs);
  }
  const ModelInfo& info() const override { return info_; }
  const std::vector<std::pair<std::string, at::Tensor>>& parameters() const override { return params_; }

  // Parameters never change (no optimizer step): restoring the buffers (running statistics,
  // num_batches_tracked) as they were in the file gives the model as loaded, without a reload.
  void reset() override {
    at::NoGradGuard no_grad;
    for (auto& [buffer, saved] : saved_buffers_) buffer.copy_(saved);
  }

  std::vector<std::string> nonfinite_batchnorm_stats() override {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < batchnorm_.size(); ++i) {
      for (const char* attr : {"running_mean", "running_var"}) {
        if (!batchnorm_[i].hasattr(attr)) continue;
        c10::IValue v = batchnorm_[i].attr(attr);
        if (v.isTensor() && v.toTensor().defined() && !at::isfinite(v.toTensor()).all().item<bool>()) {
          out.push_back(info_.batchnorm_modules[i]);
          break;
        }
      }
    }
    return out;
  }

 private:
  // model.inputs against forward's schema: a clear exit 2 naming the argument and the field,
  // before any batch runs.
  void check_inputs(const c10::FunctionSchema& schema, const ModelConfig& model) {
    const auto& all = schema.arguments();  // [0] is self
    std::vector<std::string> names, required;
    for (std::size_t i = 1; i < all.size(); ++i) {
      names.push_back(all[i].name());
      if (!all[i].default_value()) required.push_back(all[i].name());
    }
    const std::string takes = "takes " + std::to_string(required.size()) + " required input" + (required.size() == 1 ? "" : "s") +
                              " (" + join(names) + ")";
    // Single with the targets after the input (loss type "model") checks as two positional.
    const InputsKind kind = kind_ == InputsKind::Single && fields_.size() > 1 ? InputsKind::Positional : kind_;
    switch (kind) {
      case InputsKind::Single:
        if (required.size() != 1) {
          throw InputError(path_, "forward", takes + "; batchcheck feeds one input tensor unless model.inputs names the data fields "
                                                     "that feed them, e.g. \"inputs\": [\"" + join(names, "\", \"") + "\"]");
        }
        break;
      case InputsKind::Positional:
        if (fields_.size() < required.size() || fields_.size() > names.size()) {
          throw InputError(path_, "forward", takes + " but model.inputs lists " + std::to_string(fields_.size()) + " field" +
                                                 (fields_.size() == 1 ? "" : "s") + " (" + join(fields_) + ")");
        }
        break;
      case InputsKind::Named:
        args_ = model.input_args;
        for (const auto& arg : args_) {
          if (std::find(names.begin(), names.end(), arg) == names.end()) {
            throw InputError(path_, "forward", "has no argument \"" + arg + "\", which model.inputs names (arguments: " + join(names) + ")" +
                                                   did_you_mean(arg, names));
          }
        }
        for (const auto& r : required) {
          if (std::find(args_.begin(), args_.end(), r) == args_.end()) {
            throw InputError(path_, "forward", "argument \"" + r + "\" has no default and model.inputs names no field for it");
          }
        }
        break;
      case InputsKind::Record: {
        const bool dict = names.size() >= 1 && all[1].type()->kind() == c10::TypeKind::DictType;
        if (required.size() != 1 || !dict) {
          throw InputError(path_, "forward", takes + (names.empty() ? std::string() : ", its first is " + all[1].type()->annotation_str()) +
                                                 "; model.inputs \"record\" passes the whole record (" + join(fields_) +
                                                 ") as one Dict[str, Tensor] argument");
        }
        break;
      }
    }
    if (kind == InputsKind::Record) return;
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      const std::size_t arg = kind == InputsKind::Named ? index_of(names, args_[k]) : k;
      if (arg >= names.size()) continue;
      const c10::TypePtr& type = all[arg + 1].type();
      const std::string which = "argument \"" + names[arg] + "\" (" + type->annotation_str() + ")";
      if (takes_list(type) && !lists_) {
        throw InputError(path_, "forward", which + " takes a list of per-sample tensors, as a detection DataLoader's "
                                           "collate_fn=lambda b: tuple(zip(*b)) passes them: set loader.collate to {\"list\": true}");
      }
      if (!takes_list(type) && lists_ && type->kind() != c10::TypeKind::AnyType) {
        throw InputError(path_, "forward", which + " does not take the list of samples loader.collate.list passes it");
      }
      if (takes_list(type) && lists_ && k < dicts_.size()) {
        const c10::TypeKind element = list_element(type)->kind();
        if (element == c10::TypeKind::DictType && !dicts_[k]) {
          throw InputError(path_, "forward", which + " takes a dict per sample (e.g. boxes and labels), but the field \"" +
                                                 fields_[k] + "\" holds a tensor per sample");
        }
        if (element == c10::TypeKind::TensorType && dicts_[k]) {
          throw InputError(path_, "forward", which + " takes a tensor per sample, but the field \"" + fields_[k] +
                                                 "\" holds a dict per sample");
        }
      }
    }
  }

  static std::size_t index_of(const std::vector<std::string>& names, const std::string& name) {
    return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  }

  static bool takes_list(c10::TypePtr t) {
    if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
    return t->kind() == c10::TypeKind::ListType;
  }

  static c10::TypePtr list_element(c10::TypePtr t) {
    if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
    return t->cast<c10::ListType>()->getElementType();  // takes_list(t) held
  }

  void load(const c10::Device& device, Mode mode) {
    try {
      module_ = torch::jit::load(path_, device);
    } catch (const std::exception& e) {
      std::string hint = model_file_hint(classify_torch_file(read_all(path_)));
      if (!hint.empty()) throw InputError(path_, "", hint);
      const std::string full = parse_error_text(exception_message(e)).message;
      std::string newer = newer_operator_message(full);
      if (!newer.empty()) throw InputError(path_, "", newer);
      std::string msg = single_line(full);
      if (msg.size() > 240) msg = msg.substr(0, 240) + "...";
      throw InputError(path_, "", "not a loadable TorchScript archive (torch.jit.save of a scripted or traced module): " + msg);
    }
    module_.train(mode == Mode::Train);
    info_.format = "torchscript";
    // Named once: listing a TorchScript module's parameters builds their names each time.
    // A model that is already broken in its file: one pass over its weights at load.
    auto nonfinite = [](const at::Tensor& t) {
      return t.defined() && t.is_floating_point() && !at::isfinite(t).all().item<bool>();
    };
    std::set<std::string> embeddings;  // the modules whose weight rows are ids
    for (const auto& m : module_.named_modules()) {
      auto type = m.value.type()->name();
      if (type && type->qualifiedName().find("Embedding") != std::string::npos) embeddings.insert(m.name);
    }
    for (const auto& p : module_.named_parameters(true)) {
      params_.emplace_back(p.name, p.value);
      if (!nonfinite(p.value)) continue;
      info_.nonfinite_parameters.push_back(p.name);
      // How much of it: one rare word's embedding row is not every prediction.
      const at::Tensor bad = at::isfinite(p.value.detach()).logical_not();
      NonfiniteWeight w{p.name, static_cast<uint64_t>(bad.sum().item<int64_t>()), static_cast<uint64_t>(p.value.numel()), {}, 0, false};
      const std::string::size_type dot = p.name.rfind('.');
      w.embedding = embeddings.count(dot == std::string::npos ? std::string() : p.name.substr(0, dot)) > 0;
      if (bad.dim() >= 2) {
        const at::Tensor rows = bad.flatten(1).any(1).nonzero().flatten();
        w.rows_total = static_cast<uint64_t>(rows.numel());
        for (int64_t i = 0; i < std::min<int64_t>(rows.numel(), 8); ++i) w.rows.push_back(rows[i].item<int64_t>());
      }
      info_.nonfinite_weights.push_back(std::move(w));
    }
    // The buffers as loaded, kept to restore before every rank and the probes.
    for (const auto& b : module_.named_buffers(true)) {
      if (b.value.defined()) saved_buffers_.emplace_back(b.value, b.value.detach().clone());
      if (nonfinite(b.value)) info_.nonfinite_buffers.push_back(b.name);
    }
    for (const auto& m : module_.named_modules()) {
      auto type = m.value.type()->name();
      if (type && type->qualifiedName().find("BatchNorm") != std::string::npos) {
        info_.batchnorm_modules.push_back(m.name.empty() ? "<root>" : m.name);
        batchnorm_.push_back(m.value);
      }
    }
  }

  // What the interpreter takes for an instrumented copy of forward: [self, args...] with the
  // defaults filled in, as Method() would pass them.
  std::vector<c10::IValue> interpreter_stack(const torch::jit::Method& method, const std::vector<c10::IValue>& inputs) {
    auto [args, kwargs] = call_args(inputs);
    std::vector<c10::IValue> stack{module_._ivalue()};
    stack.insert(stack.end(), std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
    method.function().getSchema().checkAndNormalizeInputs(stack, kwargs);
    return stack;
  }

  // Training-mode flags that tracing turned into constants: aten::batch_norm's `training`
  // and aten::dropout's `train` are graph inputs in a scripted module (self.training), but
  // literals in a traced one.
  void find_frozen_mode_ops(const torch::jit::Method& method) {
    std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(method.function()).graph()->copy();
    torch::jit::Inline(*graph);
    std::vector<torch::jit::Block*> blocks{graph->block()};
    while (!blocks.empty()) {
      torch::jit::Block* block = blocks.back();
      blocks.pop_back();
      for (torch::jit::Node* node : block->nodes()) {
        for (torch::jit::Block* b : node->blocks()) blocks.push_back(b);
        const std::optional<FrozenFlag> flag = frozen_training_flag(node);
        if (!flag) continue;
        FrozenModeOps& ops = flag->training ? info_.frozen_train : info_.frozen_eval;
        ++(flag->batch_norm ? ops.batch_norm : ops.dropout);
      }
    }
  }

  std::string path_;
  InputsKind kind_ = InputsKind::Single;
  std::vector<std::string> fields_;  // the input fields, in model.inputs order
  std::vector<std::string> args_;    // Named: the argument each field feeds
  bool lists_ = false;               // loader.collate.list: each field comes as a list of samples
  std::vector<bool> dicts_;          // which fields hold a dict per sample
  torch::jit::Module module_;
  ModelInfo info_;
  std::vector<torch::jit::Module> batchnorm_;  // parallel to info_.batchnorm_modules
  std::vector<std::pair<std::string, at::Tensor>> params_;  // qualified name, parameter
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_buffers_;  // buffer, its value in the file
  std::unique_ptr<ForwardLocalizer> localizer_;
  std::unique_ptr<ForwardLocalizer> fp32_localizer_;  // the graph's half casts taken out (HalfRun::recorded)
  std::unique_ptr<ArgumentCheck> argument_check_;  // built on the first forward error it explains  // built on the first batch to localize
  std::unique_ptr<FrozenBatchNormCheck> frozen_batchnorm_;  // built on the first batch of one
};

}  // namespace

// model.libraries, before the archive names their operators. RTLD_GLOBAL: a library's
// operators register themselves when it loads, and may need each other's symbols.
void load_operator_libraries(const ModelConfig& model) {
  // Built against the whole LibTorch (torchvision's wheel is), a library may need its CUDA
  // libraries (libc10_cuda.so), which a CPU scan does not load otherwise.
  if (!model.libraries.empty()) load_cuda_runtime();
  for (std::size_t i = 0; i < model.libraries.size(); ++i) {
    const std::string& display = model.libraries_display[i];
    require_regular_file(display, model.libraries[i], "a shared library of operators (.so)");
    if (!::dlopen(model.libraries[i].c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      const char* why = ::dlerror();
      throw InputError(display, "", std::string("cannot load this operator library (model.libraries): ") +
                                        (why ? single_line(why) : std::string("unknown error")) +
                                        "; it must be built against the LibTorch this batchcheck links (" TORCH_VERSION ")" +
                                        libtorch_rest_note());
    }
  }
}

std::unique_ptr<ModelRunner> load_torchscript(const ModelConfig& model, const c10::Device& device,
                                              const std::vector<std::string>& fields, bool lists,
                                              const std::vector<bool>& dicts) {
  return std::make_unique<TorchScriptRunner>(model, device, fields, lists, dicts);
}

}  // namespace batchcheck
