#include "engine/model/outputs.h"

#include <string>

#include "core/base/errors.h"
#include "core/base/text.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

// Where a selection is configured, for messages: model.output or loss.aux."<key>".
struct Selector {
  std::string file, where;
};

c10::IValue pick(const c10::IValue& out, const std::variant<int64_t, std::string>& sel, const Selector& s) {
  if (std::holds_alternative<int64_t>(sel)) {
    const int64_t idx = std::get<int64_t>(sel);
    std::vector<c10::IValue> items;
    if (out.isTuple()) {
      for (const auto& e : out.toTupleRef().elements()) items.push_back(e);
    } else if (out.isList()) {
      for (const auto& e : out.toListRef()) items.push_back(e);
    } else {
      throw InputError(s.file, s.where, "is an index, but the model returns " + describe(out) + ", not a tuple or list");
    }
    const auto n = static_cast<int64_t>(items.size());
    if (idx < -n || idx >= n) {
      throw InputError(s.file, s.where, "index " + std::to_string(idx) + " is out of range: the model returns " + std::to_string(n) + " elements");
    }
    return items[static_cast<std::size_t>(idx < 0 ? idx + n : idx)];
  }
  const std::string& key = std::get<std::string>(sel);
  if (!out.isGenericDict()) throw InputError(s.file, s.where, "is a key, but the model returns " + describe(out) + ", not a dict");
  std::vector<std::string> keys;
  for (const auto& item : out.toGenericDict()) {
    std::string k = item.key().isString() ? item.key().toStringRef() : "?";
    if (k == key) return item.value();
    keys.push_back(k);
  }
  throw InputError(s.file, s.where, "the model's output has no key \"" + key + "\" (keys: " + join(keys) + ")" + did_you_mean(key, keys));
}

// Losses and the value checks read a dense, strided tensor of real numbers with data.
void require_dense(const at::Tensor& t, const std::string& model_path, const std::string& which) {
  std::string what, fix;
  if (t.is_meta()) {
    what = "a meta tensor (shape only, no data)";
    fix = "compute the prediction on a real device";
  } else if (t.is_quantized()) {
    what = "a quantized tensor (" + dtype_name(t.scalar_type()) + ")";
    fix = "return out.dequantize()";
  } else if (t.layout() == at::kMkldnn) {
    what = "an mkldnn tensor";
    fix = "return out.to_dense()";
  } else if (t.layout() != at::kStrided) {
    what = "a sparse tensor";
    fix = "return out.to_dense()";
  } else if (t.is_complex()) {
    what = "a complex tensor (" + dtype_name(t.scalar_type()) + ")";
    fix = "return a real prediction (e.g. out.abs() or torch.view_as_real(out))";
  } else {
    return;
  }
  throw InputError(model_path, which, "the model returns " + what + "; the losses batchcheck checks need a dense tensor of real numbers: " + fix);
}

at::Tensor selected_tensor(const c10::IValue& v, const Selector& s) {
  if (!v.isTensor()) throw InputError(s.file, s.where, "selects " + describe(v) + ", not a tensor");
  return v.toTensor();
}

}  // namespace

namespace {

SelectedOutputs model_losses(const c10::IValue& out, const Config& cfg) {
  SelectedOutputs r;
  const Selector main{cfg.file, cfg.model.output ? "model.output" : "loss.type"};
  const c10::IValue v = cfg.model.output ? pick(out, *cfg.model.output, main) : out;
  if (v.isTensor()) {
    r.loss_terms.emplace_back("loss", v.toTensor());
  } else if (v.isGenericDict()) {
    for (const auto& item : v.toGenericDict()) {
      if (!item.value().isTensor()) continue;
      r.loss_terms.emplace_back(item.key().isString() ? item.key().toStringRef() : "?", item.value().toTensor());
    }
  }
  if (r.loss_terms.empty() && v.isGenericDict()) {
    throw InputError(cfg.file, main.where,
                     "forward returned no losses (an empty dict): torchvision's detection models return their losses in "
                     "train mode only; scan with model.mode \"train\"");
  }
  if (r.loss_terms.empty()) {
    throw InputError(cfg.file, main.where,
                     (cfg.model.output ? "selects " : "forward returns ") + describe(v) +
                         "; with loss type \"model\" that must be the loss: a tensor, or a dict of losses as torchvision's "
                         "detection models return in train mode (scripted, they return (losses, detections): set "
                         "model.output to 0)");
  }
  for (const auto& [name, term] : r.loss_terms) {
    require_dense(term, cfg.model.path, "loss \"" + name + "\"");
    at::Tensor scalar = term.numel() == 1 ? term.reshape({}) : term.sum();
    r.prediction = r.prediction.defined() ? r.prediction + scalar : scalar;
  }
  return r;
}

}  // namespace

SelectedOutputs select_outputs(const c10::IValue& out, const Config& cfg) {
  if (returns_loss(cfg.loss.type)) return model_losses(out, cfg);
  SelectedOutputs r;
  const Selector main{cfg.file, "model.output"};
  if (!cfg.model.output) {
    if (!out.isTensor()) {
      throw InputError(cfg.file, main.where,
                       "the model returns " + describe(out) + ", not a tensor; set \"output\" to the index or key of the prediction");
    }
    r.prediction = out.toTensor();
  } else {
    r.prediction = selected_tensor(pick(out, *cfg.model.output, main), main);
  }
  require_dense(r.prediction, cfg.model.path, "output");
  for (const auto& [key, weight] : cfg.loss.aux) {
    const Selector s{cfg.file, "loss.aux." + key};
    std::variant<int64_t, std::string> sel = key;
    if (cfg.model.output && std::holds_alternative<int64_t>(*cfg.model.output)) {
      // config.cpp accepted only small integers for a tuple's index; -1 may name the same
      // element as model.output's 1.
      const int64_t idx = std::stoll(key), main_idx = std::get<int64_t>(*cfg.model.output);
      const int64_t n = out.isTuple() ? static_cast<int64_t>(out.toTupleRef().elements().size())
                        : out.isList() ? static_cast<int64_t>(out.toListRef().size())
                                       : 0;
      // Out of range is pick()'s error below, never "the same element" by wrap-around.
      if (n > 0 && idx >= -n && idx < n && (idx % n + n) % n == (main_idx % n + n) % n) {
        throw InputError(s.file, s.where, "is the same element of the model's " + std::to_string(n) +
                                              " outputs as model.output, the prediction itself; list only the extra outputs");
      }
      sel = idx;
    }
    at::Tensor t = selected_tensor(pick(out, sel, s), s);
    require_dense(t, cfg.model.path, "output \"" + key + "\"");
    r.aux.push_back(std::move(t));
  }
  return r;
}

}  // namespace batchcheck
