#include "core/findings/fixes.h"

#include <cmath>

#include <algorithm>
#include <cctype>

#include "core/base/escape.h"
#include "core/base/text.h"
#include "core/findings/contract_fixes.h"
#include "core/findings/findings.h"
#include "core/findings/index_fixes.h"

namespace batchcheck {

namespace {

// A JSON string for a config fragment inside a comment: one line, every non-ASCII escaped.
std::string json_literal(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

// A number the evidence holds at `key`, where it holds one.
std::optional<double> number_at(const nlohmann::ordered_json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
}

bool class_loss(LossType t) { return t == LossType::CrossEntropy || t == LossType::Nll; }
// Class-index targets, of a class loss or of a region loss told so.
bool class_targets(const LossConfig& l) {
  return class_loss(l.type) ||
         (is_region_loss(l.type) && (l.target_format == TargetFormat::Index || l.target_format == TargetFormat::Classes));
}

// The two shapes torch.stack names when it refuses samples of unequal size; empty otherwise.
std::vector<std::vector<int64_t>> stack_error_shapes(const std::string& error) {
  std::vector<std::vector<int64_t>> out;
  std::string::size_type at = error.find("but got [");
  for (int k = 0; k < 2 && at != std::string::npos; ++k) {
    const std::string::size_type open = error.find('[', at), close = error.find(']', open);
    if (open == std::string::npos || close == std::string::npos) break;
    std::vector<int64_t> shape;
    std::string number;
    for (std::string::size_type i = open + 1; i <= close; ++i) {
      if (std::isdigit(static_cast<unsigned char>(error[i]))) {
        number += error[i];
      } else if (!number.empty()) {
        shape.push_back(std::stoll(number.substr(0, 18)));
        number.clear();
      }
    }
    out.push_back(shape);
    at = error.find(" and [", close);
  }
  return out;
}

// The most common sample shape of a collate error whose samples differ past their first
// dimension (images of two sizes), from the samples' shapes or, for batchcheck.scan()'s loader,
// torch.stack's own words ("got [3, 64, 64] at entry 0 and [3, 32, 32] at entry 3"); empty where
// they differ in their first dimension only (sequences of two lengths) or nothing says.
std::vector<int64_t> unequal_sample_shape(const nlohmann::ordered_json& evidence) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> common;
  uint64_t most = 0;
  for (const auto& s : evidence.value("sample_shapes", nlohmann::ordered_json::array())) {
    shapes.push_back(s.value("shape", std::vector<int64_t>{}));
    if (s.value("count", uint64_t{0}) > most) {
      most = s.value("count", uint64_t{0});
      common = shapes.back();
    }
  }
  if (shapes.empty()) {
    shapes = stack_error_shapes(evidence.value("error", std::string()));
    if (shapes.size() != 2) return {};
    common = shapes[0];
  }
  for (const auto& shape : shapes) {
    if (shape.size() != common.size()) continue;
    for (std::size_t d = 1; d < shape.size(); ++d) {
      if (shape[d] != common[d]) return common;
    }
  }
  return {};
}

// Whether an extra output's key is an index into a tuple: as the prediction's, else all digits.
bool aux_index(const FixContext& c, const std::string& key) {
  const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; });
  return digits && (!c.output || std::holds_alternative<int64_t>(*c.output));
}

// A Python name for an extra output: out_aux, out_1.
std::string key_name(const std::string& key) {
  std::string name = "out_";
  for (char ch : key) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
}

std::string output_selector(const FixContext& c) {
  if (!c.output) return "";
  if (std::holds_alternative<int64_t>(*c.output)) return "[" + std::to_string(std::get<int64_t>(*c.output)) + "]";
  return "[" + python_literal(std::get<std::string>(*c.output)) + "]";
}

// BCELoss after a sigmoid -> BCEWithLogitsLoss on the logits; `why` ends the title.
Fix bce_with_logits(const std::string& why) {
  return {"bce-with-logits", "return logits and use BCEWithLogitsLoss (drop the final sigmoid)" + why,
          "nn.BCEWithLogitsLoss()  # model returns logits", "numerically stable; apply torch.sigmoid at inference", {}};
}

// The lines of forward and the loss inside the torch.autocast the scan ran them in (its
// precision, where the step enters none of its own), so a half overflow shows as it did.
std::string under_autocast(const FixContext& c, const std::string& lines) {
  if (c.autocast_dtype.empty() || lines.empty()) return lines;
  std::string out = "with torch.autocast(" + python_literal(c.autocast_device) + ", dtype=torch." + c.autocast_dtype + "):\n";
  std::string::size_type at = 0;
  while (at < lines.size()) {
    const std::string::size_type end = lines.find('\n', at);
    out += "    " + lines.substr(at, end - at) + "\n";
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

// `idx = [...]` for the batch's samples, wrapped 16 to a line: pasted, it runs whole.
std::string index_line(const std::vector<int64_t>& idx) {
  const std::string listed = python_indices(idx);
  if (listed.rfind("range(", 0) == 0 || idx.size() <= 16) return "idx = " + listed + "\n";
  std::string out = "idx = [\n";
  for (std::size_t i = 0; i < idx.size(); i += 16) {
    std::vector<int64_t> row(idx.begin() + i, idx.begin() + std::min(idx.size(), i + 16));
    out += "    " + join_ints(row) + ",\n";
  }
  return out + "]\n";
}

// The report's JSON keeps a long batch's samples as data too (the code lists them already).
std::vector<int64_t> listed_indices(const std::vector<int64_t>& idx) {
  return idx.size() > 16 ? idx : std::vector<int64_t>{};
}

// The failing batch, exactly: the model sees all of it (BatchNorm's statistics depend on
// every sample), so `reproduce` never lists just the bad ones. The code is lines that run as
// pasted: the batch built by the loader's collate and passed as the step or the model takes it
// (model.call where batchcheck.scan() says how forward is called on it).
Fix reproduce(const Finding& f, const FixContext& c, bool with_loss, bool with_backward) {
  const std::vector<int64_t>& idx = c.batch_indices.empty() ? f.samples : c.batch_indices;
  // The user's own collate function where it is known by name (batchcheck.scan() says), else
  // a padding collate's `collate_fn`, else PyTorch's default_collate.
  const std::string::size_type dot = c.collate_fn.rfind('.');
  const bool by_loader = c.collate_fn.rfind("loader.", 0) == 0;
  const std::string collate = !c.collate_fn.empty() ? (by_loader || dot == std::string::npos ? c.collate_fn : c.collate_fn.substr(dot + 1))
                              : c.collate_pads      ? "collate_fn"
                                                    : "default_collate";
  const bool plain = c.collate_fn.empty() && !c.collate_pads && !c.collate_list;
  std::string code = "import torch\nfrom torch import nn\n";
  if (plain) code += "from torch.utils.data import default_collate\n";
  if (!c.collate_fn.empty() && !by_loader && dot != std::string::npos) {
    code += "from " + c.collate_fn.substr(0, dot) + " import " + collate + "\n";
  }
  code += index_line(idx);
  const std::string samples = "[dataset[i] for i in idx]";
  const std::string train = std::string("model.train(") + (c.mode == Mode::Train ? "True" : "False") + ")\n";
  const std::string where = f.probe ? "a batch of the first " + plural(idx.size(), "sample")
                                    : "batch " + (f.batch ? std::to_string(*f.batch) : std::string("?")) +
                                          (f.rank && c.geometry && c.geometry->distributed() ? " of rank " + std::to_string(*f.rank) : "");
  if (c.loss.type == LossType::Step && c.call.loss.empty()) {
    // The user's own step on the batch as their loader makes it.
    code += "batch = " + collate + "(" + samples + ")\n" + train + under_autocast(c, "loss = step(model, batch)\n") +
            (with_backward ? "loss.backward()\n" : "");
    return {"reproduce", "reproduce it in Python on the same samples (" + where + ")", code,
            std::string("needs your Dataset object as `dataset`, the model as `model` and your training step as `step`") +
                (by_loader ? ", and your DataLoader as `loader`" : ""),
            {}, listed_indices(idx)};
  }
  const bool called = !c.call.forward.empty();
  std::string target = "y";
  if (called) {
    // batchcheck.scan(): forward called on the batch as the loader yields it.
    code += "batch = " + collate + "(" + samples + ")\n";
    if (!c.call.targets.empty()) target = c.call.targets;
  } else if (c.collate_list) {
    code += "x, y = (list(field) for field in zip(*" + samples + "))\n";
  } else {
    code += "x, y = " + collate + "(" + samples + ")\n";
  }
  code += train;
  const std::string::size_type body = code.size();  // forward and loss: under the scan's autocast
  const std::string forward = called ? c.call.forward : (c.loss.type == LossType::Model ? "model(x, y)" : "model(x)");
  const std::string select = called && !c.call.select.empty() ? "out = " + c.call.select + "\n" : "";
  if (c.loss.type == LossType::Model) {
    // forward computes the loss from the targets; torchvision's returns a dict of losses.
    code += "out = " + forward + output_selector(c) + "\n" + select;
    if (with_loss) {
      code += "loss = sum(out.values()) if isinstance(out, dict) else out\n";
    }
  } else if (!c.loss.aux.empty()) {
    // The extra outputs (loss.aux) join the loss as the training loop adds them.
    code += "outs = " + forward + "\nout = outs" + output_selector(c) + "\n" + select;
    for (const auto& [key, weight] : c.loss.aux) {
      code += key_name(key) + " = outs[" + (aux_index(c, key) ? key : python_literal(key)) + "]\n";
    }
  } else {
    code += "out = " + forward + output_selector(c) + "\n" + select;
  }
  if (with_loss && c.loss.type == LossType::Step) {
    code += "loss = " + c.call.loss + "(out, " + target + ")\n";  // the loss given as a callable
  } else if (with_loss && c.loss.type != LossType::None && c.loss.type != LossType::Model) {
    const std::string loss = loss_constructor(c.loss);
    code += "loss = " + loss + "(out, " + target + ")";
    for (const auto& [key, weight] : c.loss.aux) code += " + " + format_number(weight) + " * " + loss + "(" + key_name(key) + ", " + target + ")";
    code += "\n";
  }
  code = code.substr(0, body) + under_autocast(c, code.substr(body));
  if (with_loss && c.loss.type != LossType::None && with_backward) code += "loss.backward()\n";
  return {"reproduce", "reproduce it in Python on the same samples (" + where + ")", code,
          std::string("needs your Dataset object as `dataset` and the model as `model`") +
              (by_loader                                ? " and your DataLoader as `loader`"
               : c.collate_pads && c.collate_fn.empty() ? " and your padding collate function as `collate_fn`"
                                                        : "") +
              (with_loss && (is_region_loss(c.loss.type) || !c.call.loss.empty())
                   ? ", and your loss object as `" + (c.call.loss.empty() ? std::string("loss_fn") : c.call.loss) + "`"
                   : std::string()),
          {}, listed_indices(idx)};
}

// drop-last and batch-size-divisor, where they change something: never a fix that is
// already applied or that drops nothing.
void tail_fixes(Finding& f, const Geometry& g) {
  // A batch sampler of the user's decides the sizes, not batch_size/drop_last (a shuffled
  // loader's recorded order of full batches is no such sampler).
  if (g.recorded() && !g.recorded_uniform) return;
  const uint64_t tail = g.spec.batch_size ? g.samples_per_rank % g.spec.batch_size : 0;
  if (!g.spec.drop_last && tail != 0) f.fixes.push_back(fix_drop_last(g));
  if (tail != 0 && g.samples_per_rank > 1) {
    Fix d = fix_batch_size_divisor(g);
    if (!d.batch_sizes.empty()) f.fixes.push_back(d);
  }
}

Fix explicit_squeeze(const std::string& tradeoff) {
  return {"explicit-squeeze-dim", "squeeze only the dimension you mean", "x.squeeze(-1)  # instead of x.squeeze()",
          tradeoff, {}};
}

Fix dynamic_batch_dim(uint64_t batch_size) {
  return {"dynamic-batch-dim", "derive the batch dimension from the input",
          "x.view(x.size(0), -1)  # or x.flatten(1), instead of x.view(" + std::to_string(batch_size) + ", -1)",
          "the model then runs at every batch size", {}};
}

std::vector<int64_t> shape_of(const nlohmann::ordered_json& j) {
  std::vector<int64_t> out;
  if (j.is_array()) {
    for (const auto& v : j) out.push_back(v.get<int64_t>());
  }
  return out;
}

// How to make the target fit the prediction; nullopt where reshaping the target is not the fix.
std::optional<std::string> reshape_target(const std::vector<int64_t>& out, const std::vector<int64_t>& tgt, const LossConfig& l) {
  if (out.empty() || tgt.empty()) return std::nullopt;
  if (is_region_loss(l.type) && l.target_format == TargetFormat::Index) {
    // MONAI's class indices keep a channel of one: (N, 1, d...).
    if (tgt.size() + 1 == out.size()) return "target = target.unsqueeze(1)";
    return std::nullopt;
  }
  if (class_targets(l)) {
    // Predictions (N, C, d...), class targets (N, d...): masks stored as (N, 1, H, W).
    if (tgt.size() == out.size() && tgt.size() >= 2 && tgt[1] == 1) return "target = target.squeeze(1)";
    return std::nullopt;
  }
  if (out.size() == tgt.size() + 1 && out[1] == 1) return "target = target.unsqueeze(1)";
  if (tgt.size() == out.size() + 1 && tgt[1] == 1) return "target = target.squeeze(1)";
  uint64_t a = 1, b = 1;
  for (auto d : out) a *= static_cast<uint64_t>(d);
  for (auto d : tgt) b *= static_cast<uint64_t>(d);
  if (a == b) return "target = target.view_as(prediction)";
  return std::nullopt;
}

}  // namespace

std::string python_indices(const std::vector<int64_t>& indices) {
  bool consecutive = indices.size() > 2;
  for (std::size_t i = 1; i < indices.size() && consecutive; ++i) consecutive = indices[i] == indices[i - 1] + 1;
  if (consecutive) return "range(" + std::to_string(indices.front()) + ", " + std::to_string(indices.back() + 1) + ")";
  return "[" + join_ints(indices) + "]";
}

std::string loss_class(LossType t) {
  switch (t) {
    case LossType::Dice: return "DiceLoss";
    case LossType::DiceCe: return "DiceCELoss";
    case LossType::Jaccard: return "JaccardLoss";
    case LossType::Focal: return "FocalLoss";
    default: break;
  }
  return to_string(t);
}

std::string loss_constructor(const LossConfig& l) {
  std::string name;
  switch (l.type) {
    case LossType::Bce: name = "nn.BCELoss"; break;
    case LossType::BceWithLogits: name = "nn.BCEWithLogitsLoss"; break;
    case LossType::CrossEntropy: name = "nn.CrossEntropyLoss"; break;
    case LossType::Nll: name = "nn.NLLLoss"; break;
    case LossType::Mse: name = "nn.MSELoss"; break;
    case LossType::L1: name = "nn.L1Loss"; break;
    case LossType::SmoothL1: name = "nn.SmoothL1Loss"; break;
    case LossType::Dice:
    case LossType::DiceCe:
    case LossType::Jaccard:
    case LossType::Focal: return "loss_fn";  // MONAI's or smp's object, as the user built it
    case LossType::None:
    case LossType::Model:
    case LossType::Step: return "";
  }
  auto tensor = [](const std::vector<double>& v) {
    std::vector<std::string> parts;
    for (double d : v) parts.push_back(format_number(d));
    return "torch.tensor([" + join(parts) + "])";
  };
  std::vector<std::string> args;
  if (!l.weight.empty()) args.push_back("weight=" + tensor(l.weight));
  if (!l.pos_weight.empty()) args.push_back("pos_weight=" + tensor(l.pos_weight));
  if (class_loss(l.type) && l.ignore_index != -100) args.push_back("ignore_index=" + std::to_string(l.ignore_index));
  if (l.reduction != Reduction::Mean) args.push_back(std::string("reduction='") + to_string(l.reduction) + "'");
  if (l.type == LossType::CrossEntropy && l.label_smoothing != 0) args.push_back("label_smoothing=" + format_number(l.label_smoothing));
  if (l.type == LossType::SmoothL1 && l.beta != 1) args.push_back("beta=" + format_number(l.beta));
  return name + "(" + join(args) + ")";
}

void attach_fixes(Finding& f, const FixContext& c) {
  const Geometry& g = *c.geometry;
  const uint64_t size = f.evidence.value("batch_size", uint64_t{0});
  const bool small_batch = size > 0 && size < g.spec.batch_size;
  // A failure at a small batch: the geometry's tail (or a probe of a small size).
  // A probe warning is at a size the loader never produces: its tail fixes would not apply.
  const bool tail = small_batch && ((f.probe && f.severity == Severity::Error) ||
                                    (!f.probe && f.batch && *f.batch + 1 == g.batches_per_rank));
  const LossType loss = c.loss.type;
  const std::string& id = f.id;
  auto maybe_tail = [&] {
    if (tail) tail_fixes(f, g);
  };
  // An op's own contract (ctc_loss, pack_padded_sequence): its fixes, then the reproduce.
  if (contract_fixes(f)) {
    f.fixes.push_back(reproduce(f, c, id != "forward-error" && id != "collate-error", false));
    return;
  }

  if (id == "half-overflow" || id == "half-headroom") {
    const std::string module = f.evidence.contains("op") ? f.evidence["op"].value("module", "") : "";
    const std::string dtype = f.evidence.value("dtype", f.evidence.contains("op") ? f.evidence["op"].value("dtype", "") : "");
    // bfloat16 has float32's range already: a bfloat16 finding is precision, not range, so
    // "train in bfloat16" would change nothing.
    if (dtype != "bfloat16") {
      f.fixes.push_back({"use-bf16", "train in bfloat16 where the hardware has it (Ampere GPUs and later, recent CPUs): float32's range",
                         "with torch.autocast(device_type, dtype=torch.bfloat16):  # no GradScaler needed",
                         "8 bits of mantissa instead of 10: check the accuracy you reach", {}});
    }
    f.fixes.push_back({"fp32-module",
                       "run " + (module.empty() ? std::string("the op's block") : "the module " + python_literal(module)) +
                           " in float32 inside the autocast region",
                       "with torch.autocast(device_type, enabled=False): y = block(x.float())",
                       "that block runs at float32's speed", {}});
    f.fixes.push_back({"scale-inputs", "keep the values this op sees small: normalize its input, scale attention logits by 1/sqrt(d)",
                       "x = (x - mean) / std  # or F.layer_norm before the block",
                       "a GradScaler does not help: it scales the gradients, not forward's values", {}});
    f.fixes.push_back(reproduce(f, c, true, false));
  } else if (id == "bce-autocast-unsafe") {
    f.fixes.push_back(bce_with_logits(": safe under autocast"));
  } else if (id == "batchnorm-single-value") {
    maybe_tail();
    // The module that raised, as the model has it (BatchNorm1d, BatchNorm2d, SyncBatchNorm).
    const std::string type = f.evidence.value("module_type", std::string());
    const std::string module = f.evidence.value("module", std::string());
    const std::string norm = type.empty() ? std::string("BatchNorm") : type;
    f.fixes.push_back({"groupnorm-instead-of-batchnorm", "normalize per sample instead of per batch",
                       "nn.GroupNorm(num_groups, num_channels)  # instead of nn." + norm + "(num_channels)" +
                           (module.empty() ? std::string() : " at " + python_literal(module)),
                       "changes the architecture: retrain; independent of the batch size", {}});
    f.fixes.push_back(reproduce(f, c, false, false));
  } else if (id == "hardcoded-batch-size") {
    f.fixes.push_back(dynamic_batch_dim(g.spec.batch_size));
    if (size == 1) f.fixes.push_back(explicit_squeeze("a batch of one keeps its batch dimension"));
    maybe_tail();
    f.fixes.push_back(reproduce(f, c, false, false));
  } else if (id == "batch-dim-mismatch") {
    // The model drops or fixes the batch dimension: the model is to fix, never the target.
    if (size == 1) f.fixes.push_back(explicit_squeeze("a batch of one keeps its batch dimension"));
    f.fixes.push_back(dynamic_batch_dim(g.spec.batch_size));
    maybe_tail();
    f.fixes.push_back(reproduce(f, c, false, false));
  } else if (id == "shape-mismatch") {
    auto out = shape_of(f.evidence.value("output_shape", nlohmann::ordered_json()));
    auto tgt = shape_of(f.evidence.value("target_shape", nlohmann::ordered_json()));
    // A prediction whose batch dimension is wrong is the model's fault (batch-dim-mismatch).
    const bool batch_ok = !out.empty() && static_cast<uint64_t>(out[0]) == size;
    if (auto code = batch_ok ? reshape_target(out, tgt, c.loss) : std::nullopt) {
      f.fixes.push_back({"reshape-target", "make the target's shape match what the loss expects", *code,
                         "check that the reshaped target still lines up sample by sample", {}});
    }
    if (size == 1 && out.size() + 1 == tgt.size()) f.fixes.push_back(explicit_squeeze("a batch of one keeps its batch dimension"));
    maybe_tail();
    f.fixes.push_back(reproduce(f, c, true, false));
  } else if (id == "output-nonfinite" || id == "output-out-of-range") {
    // A NaN the model's input already held: no loss or clamp removes it from the data.
    const bool from_input = id == "output-nonfinite" && f.root_cause.is_object() && f.root_cause.value("kind", "") == "input";
    if (from_input) {
      f.fixes.push_back({"clean-data", "remove or impute the samples with NaN/Inf: the prediction's NaN comes from the input",
                         "np.isfinite(x.reshape(len(x), -1)).all(axis=1)  # keep mask",
                         "fewer samples, or imputed values", {}});
    }
    if (loss == LossType::Bce && !from_input) {
      f.fixes.push_back(bce_with_logits(""));
    }
    if (id == "output-out-of-range" && is_region_loss(loss) && c.loss.activation == Activation::None) {
      f.fixes.push_back({"loss-activation", "let the loss apply the model's activation to its logits",
                         "DiceLoss(sigmoid=True)  # MONAI (softmax=True for several classes); smp: DiceLoss(mode, from_logits=True)",
                         "batchcheck.scan() reads the flag from the loss object; a config says \"activation\": \"sigmoid\" (or \"softmax\")",
                         {}});
    }
    if (id == "output-out-of-range") {
      if (loss == LossType::Nll) {
        f.fixes.push_back({"log-softmax-output", "return log-probabilities", "F.log_softmax(logits, dim=1)",
                           "or return logits and use cross_entropy", {}});
      }
      if (!is_region_loss(loss)) f.fixes.push_back({"clamp-predictions", "clamp predictions into the allowed range",
                         loss == LossType::Bce ? "pred = pred.clamp(1e-7, 1 - 1e-7)" : "pred = pred.clamp(lo, hi)",
                         "hides the cause; gradients vanish outside the range", {}});
    }
    maybe_tail();
    // A NaN prediction shows in `out`; the loss line would raise first where the batch has
    // another fault (a label past the classes). BCELoss raises on it, as on a prediction out of range.
    f.fixes.push_back(reproduce(f, c, id == "output-out-of-range" || loss == LossType::Bce || !c.loss.aux.empty(), false));
  } else if (id == "target-out-of-range") {
    const auto& vals = f.evidence.value("offending_values", nlohmann::ordered_json::array());
    // A class index inside the user's step: the op's own evidence (core/pipeline/op_faults).
    const nlohmann::ordered_json none = nlohmann::ordered_json::object();
    const nlohmann::ordered_json& op = f.evidence.contains("index_fault") ? f.evidence["index_fault"] : none;
    const bool in_step = op.value("what", std::string()) == "class index";
    const bool class_indices = f.evidence.contains("classes") || in_step;
    if (class_indices) {
      const double value = in_step ? op.value("value", 0.0) : vals.empty() ? 255.0 : vals[0].get<double>();
      const double classes = in_step ? op.value("classes", 0.0) : f.evidence.value("classes", 0.0);
      const std::string v = format_number(value);
      std::string ignore;
      if (in_step) {
        ignore = ignore_index_call(op.value("op", std::string()), v);
      } else if (loss != LossType::DiceCe) {  // MONAI's DiceCELoss takes no ignore_index
        ignore = is_region_loss(loss) ? "loss_fn = " + loss_class(loss) + "(..., ignore_index=" + v + ")  # MONAI and smp both take it"
                                      : std::string(loss == LossType::Nll ? "nn.NLLLoss" : "nn.CrossEntropyLoss") +
                                            "(ignore_index=" + v + ")";
      }
      // The smallest label seen: the op's, or the target field's in this batch. A loss inside a
      // library's forward (torchvision's detection heads) takes no argument of the user's.
      if (in_step && (op.contains("called_from") || library_location(op.value("location", std::string())))) {
        library_class_index_fixes(f.fixes, value, classes);
      } else {
        class_index_fixes(f.fixes, value, classes, ignore, in_step ? number_at(op, "smallest") : number_at(f.evidence, "min"));
      }
    } else if (class_loss(loss)) {
      // Soft labels (class probabilities): ignore_index does not apply to them.
      f.fixes.push_back({"normalize-soft-targets", "make each target a probability distribution over the classes",
                         "target = target.clamp(min=0); target = target / target.sum(dim=1, keepdim=True)",
                         "changes the labels where they were not probabilities", {}});
    } else {
      // Scaling by 255 is right only where the values say 8-bit (a 0/255 mask): a label of 2.0
      // among 0/1 labels would become 0.008 and every 1.0 label 0.004.
      const double mx = f.evidence.value("max", 0.0), mn = f.evidence.value("min", 0.0);
      const bool eight_bit = mx >= 128 && mx <= 255 && mx == std::floor(mx) && mn >= 0;
      if (eight_bit) {
        f.fixes.push_back({"scale-targets", "scale 0..255 masks to 0..1", "target = target / 255.0",
                           "right when the masks are 8-bit images (their largest value is " + format_number(mx) + ")", {}});
      } else {
        f.fixes.push_back({"correct-targets", "correct the targets of the samples named: the loss takes values in [0, 1]",
                           "assert ((y >= 0) & (y <= 1)).all(), y[(y < 0) | (y > 1)]  # in your Dataset, per sample",
                           "finds each such label where it is made; a label error is the data's, not the model's", {}});
      }
      f.fixes.push_back({"clamp-targets", "clamp targets into the allowed range", "target = target.clamp(0, 1)",
                         "hides label errors", {}});
    }
  } else if (id == "input-nonfinite" || id == "target-nonfinite") {
    f.fixes.push_back({"clean-data", "remove or impute the samples with NaN/Inf",
                       "np.isfinite(x.reshape(len(x), -1)).all(axis=1)  # keep mask",
                       "fewer samples, or imputed values", {}});
  } else if (id == "target-dtype") {
    const bool cls = class_targets(c.loss);
    f.fixes.push_back({"cast-target", cls ? "cast class indices to int64" : "cast targets to the prediction's dtype",
                       cls ? "target = target.long()" : "target = target.to(prediction.dtype)",
                       "a cast in the Dataset or collate_fn; the values are unchanged", {}});
  } else if (id == "loss-nonfinite") {
    if (f.message.find("ignore_index") != std::string::npos) {
      f.fixes.push_back({"ignore-index-mean", "avoid batches whose targets are all ignored",
                         "loss = loss_sum / max(valid_count, 1)  # reduction='sum' then divide",
                         "changes the weighting of small batches", {}});
    }
    maybe_tail();
    f.fixes.push_back(reproduce(f, c, true, false));
  } else if (id == "backward-error") {
    if (f.message.find("implicitly created only for scalar outputs") != std::string::npos) {
      f.fixes.push_back({"reduce-loss", "reduce the loss to one number before backward()",
                         "return loss.mean()  # a per-sample loss (reduction=\"none\"): backward() takes one number",
                         ".sum() instead weights the batch by its size", {}});
    }
    if (f.message.find("does not require grad and does not have a grad_fn") != std::string::npos) {
      f.fixes.push_back({"return-loss-tensor", "return the loss tensor itself, with its graph",
                         "return loss  # not loss.item(), loss.detach(), torch.tensor(loss.item()) or a constant",
                         "none: detach only what you log", {}});
    }
    if (f.message.find("inplace operation") != std::string::npos) {
      f.fixes.push_back({"out-of-place", "replace the in-place op on a tensor autograd still needs",
                         "y = y * mask  # instead of y *= mask (or y.mul_(mask)); likewise torch.sigmoid(x) instead of x.sigmoid_()",
                         "one extra tensor per replaced op", {}});
    }
    maybe_tail();
    f.fixes.push_back(reproduce(f, c, true, true));
  } else if (id == "gradient-nonfinite") {
    f.fixes.push_back({"clip-and-find", "find the op whose gradient overflows (anomaly mode names it)",
                       "with torch.autograd.detect_anomaly(): loss.backward()",
                       "slow: for debugging only", {}});
    f.fixes.push_back(reproduce(f, c, true, true));
  } else if (id == "trace-frozen-shape") {
    f.fixes.push_back({"script-instead", "script the model: its sizes then follow each batch",
                       "torch.jit.script(model).save(path)", "needs code TorchScript can compile", {}});
    f.fixes.push_back({"scan-eager", "scan the eager model on your own loader: no trace at all",
                       "report = batchcheck.scan(model, loader, loss)  # scripts the model, or runs it eagerly where it cannot",
                       "from Python, where your model and loader are", {}});
    f.fixes.push_back(dynamic_batch_dim(g.spec.batch_size));  // where the code itself holds the literal
    maybe_tail();
  } else if (id == "batch-unchecked") {
    // Nothing of the batch was checked: the user runs it themselves, or gives the scan code
    // a capture can record (sizes read from tensors, no branch on a tensor's value).
    f.fixes.push_back(reproduce(f, c, true, true));
    f.fixes.push_back({"sizes-from-tensors", "read sizes from the tensors, not as Python numbers, so one trace serves every shape",
                       "n = x.size(0)  # instead of n = len(x); torch.arange(x.size(1)) instead of range(len(...))",
                       "only where the step's own code freezes the shape", {}});
  } else if (id == "export-batch-specialized") {
    maybe_tail();  // the tail of one is what the program refuses: no re-export accepts it
  } else if (id == "export-shape-guard") {
    const auto& guard = f.evidence.value("guard", nlohmann::ordered_json::object());
    const int64_t dim = guard.value("dim", int64_t{0});
    const std::string check = guard.value("check", std::string());
    if (dim == 0 && (check == "min" || check == "max" || check == "size")) {
      maybe_tail();
      f.fixes.push_back({"re-export-dynamic-batch", "export again with a batch dimension that accepts every batch size",
                         "ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim(\"batch\", min=1)},)); "
                         "torch._inductor.aoti_compile_and_package(ep, package_path=path)",
                         "code compiled for any batch size can be slower than code specialized for one", {}});
    } else if (check == "size") {
      f.fixes.push_back({"re-export-dynamic-dim",
                         "export again with dimension " + std::to_string(dim) + " dynamic, or check that the data is the one the model was exported for",
                         "dynamic_shapes=({" + std::to_string(dim) + ": torch.export.Dim(\"d" + std::to_string(dim) + "\")},)",
                         "only when the model really accepts other sizes there", {}});
    }
  } else if (id == "collate-error") {
    const std::string field = f.evidence.value("field", std::string("inputs"));
    if (f.evidence.value("collate", std::string()) == "yours") {
      // Their own code raised: what it needs is theirs to say; the batch rebuilt shows it.
    } else if (f.evidence.value("collate", std::string()) == "default") {
      const bool inputs = field == "inputs";
      // Samples that differ past their first dimension (images of two sizes): pad_sequence
      // cannot join them either; one size in the Dataset's transform can.
      const std::vector<int64_t> common = unequal_sample_shape(f.evidence);
      if (common.size() >= 3) {
        const std::string hw = std::to_string(common[common.size() - 2]) + ", " + std::to_string(common.back());
        f.fixes.push_back({"resize-samples", "give every sample of " + field + " one size in the Dataset's transform (" + hw + ")",
                           "transforms.Resize((" + hw + "))  # first in the transform; torchvision.transforms",
                           "resampling changes the smaller images' detail", {}});
      }
      f.fixes.push_back({"pad-collate-variable-length",
                         "pad the variable-length " + field + " to the longest sample of each batch",
                         std::string("DataLoader(..., collate_fn=lambda b: (") +
                             (inputs ? "pad_sequence([x for x, _ in b], batch_first=True, padding_value=0), default_collate([y for _, y in b])"
                                     : "default_collate([x for x, _ in b]), pad_sequence([y for _, y in b], batch_first=True, padding_value=-100)") +
                             "))  # batchcheck config: \"loader\": {\"collate\": {\"pad\": {" + json_literal(field) + ": " +
                             (inputs ? "0" : "-100") + "}}}",
                         inputs ? "padded positions must be masked (attention mask, or lengths for pack_padded_sequence)"
                                : "the padding value must be ignored by the loss (ignore_index=-100)",
                         {}});
    } else {
      f.fixes.push_back({"same-trailing-dims", "make the samples of " + field + " differ only in their first dimension",
                         "x = x.reshape(-1, features)  # pad_sequence pads dimension 0 of every sample",
                         "pad_sequence needs equal sizes in every other dimension", {}});
    }
    f.fixes.push_back(reproduce(f, c, false, false));
  } else if (id == "sample-unreadable") {
    const auto& files = f.evidence.value("files", nlohmann::ordered_json::array());
    const bool dataset = f.evidence.value("source", "") == "dataset";
    std::string first;
    int64_t index = -1;
    if (!files.empty() && files.front().is_object()) {
      first = files.front().value("file", "");
      index = files.front().value("index", int64_t{-1});
    }
    if (!first.empty()) {
      // Python, run where the user trains (no interpreter named); the path is a file name from
      // the data: quoted for Python, never for a shell.
      auto ends = [&first](const char* e) {
        const std::string s(e);
        return first.size() >= s.size() && first.compare(first.size() - s.size(), s.size(), s) == 0;
      };
      const bool image = !dataset || ends(".jpg") || ends(".jpeg") || ends(".png") || ends(".webp") || ends(".bmp") || ends(".JPEG");
      const std::string open = ends(".npy")                  ? "import numpy as np; np.load(" + python_literal(first) + ")"
                               : ends(".pt") || ends(".pth") ? "import torch; torch.load(" + python_literal(first) + ")"
                               : image ? "from PIL import Image; Image.open(" + python_literal(first) + ").convert(\"RGB\")"
                                       : "open(" + python_literal(first) + ", \"rb\").read()";
      f.fixes.push_back({"replace-file", "re-encode or remove the file (and check the copy that produced it)",
                         open + "  # raises the same error", "a removed file shifts every later sample's index", {}});
    } else if (index >= 0) {
      f.fixes.push_back({"replace-file", "find the sample's file in your Dataset and re-encode or remove it",
                         "dataset[" + std::to_string(index) + "]  # raises the same error; its file is the one your Dataset reads there",
                         "a removed file shifts every later sample's index", {}});
    }
    if (dataset) {
      std::vector<int64_t> bad;
      for (const auto& file : files) {
        if (file.is_object() && file.value("index", int64_t{-1}) >= 0) bad.push_back(file.value("index", int64_t{-1}));
      }
      f.fixes.push_back({"skip-unreadable", "train on the other samples",
                         "from torch.utils.data import Subset; bad = set(" + python_indices(bad) +
                             "); dataset = Subset(dataset, [i for i in range(len(dataset)) if i not in bad])",
                         "works on any Dataset; those samples are not trained on", {}});
    } else {
      f.fixes.push_back({"skip-unreadable", "let ImageFolder skip files that do not open",
                         "ImageFolder(root, transform, is_valid_file=lambda p: p.lower().endswith(IMG_EXTENSIONS) and opens(p))"
                         "  # opens(p): Image.open(p).convert('RGB') inside try/except OSError",
                         "opening every file once at start-up; skipped files are not trained on", {}});
    }
  } else if (id == "model-nonfinite") {
    // A few rows of a parameter (one rare word's embedding): those rows reset train on.
    const nlohmann::ordered_json none = nlohmann::ordered_json::array();
    const auto& weights = f.evidence.contains("nonfinite_weights") ? f.evidence["nonfinite_weights"] : none;
    for (const auto& w : weights) {
      const auto rows = w.value("rows", std::vector<int64_t>{});
      if (rows.empty() || !w.value("embedding", false) || w.value("nonfinite", uint64_t{0}) == w.value("values", uint64_t{0})) continue;
      const std::string name = w.value("name", std::string());
      f.fixes.push_back({"reset-nonfinite-rows",
                         "set the " + plural(w.value("rows_total", uint64_t{0}), "row") + " of " + name +
                             " that hold NaN or Inf to finite values, and find why they diverged",
                         "with torch.no_grad():\n    w = model.get_parameter(" + python_literal(name) +
                             ")\n    bad = ~torch.isfinite(w).flatten(1).all(1)\n    w[bad] = w[~bad].mean(0)",
                         "those rows restart from the mean of the others; a loss that blew up on them will again "
                         "(scan the batches that hold their ids)",
                         {}});
      break;
    }
    f.fixes.push_back({"earlier-checkpoint", "load a checkpoint saved before the weights turned NaN",
                       "bad = [n for n, t in model.state_dict().items() if t.is_floating_point() and not torch.isfinite(t).all()]",
                       "loses the steps after it; the cause (a diverging loss) remains", {}});
    f.fixes.push_back({"clip-gradients", "bound each step so that one batch cannot blow the weights up",
                       "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # before optimizer.step()",
                       "tune max_norm; a NaN loss still needs its batch found (batchcheck scan)", {}});
  } else if (id == "batch-out-of-memory") {
    const uint64_t bytes = f.evidence.value("bytes_requested", uint64_t{0});
    const uint64_t smaller = std::max<uint64_t>(1, g.spec.batch_size / 2);
    f.fixes.push_back({"smaller-batch-size", "use a smaller batch size, e.g. " + std::to_string(smaller),
                       "DataLoader(dataset, batch_size=" + std::to_string(smaller) + ")  # keep the effective batch with gradient accumulation",
                       bytes ? "the allocation asked for " + std::to_string(bytes) + " bytes; memory grows with the batch"
                             : "memory grows with the batch",
                       {}});
    f.fixes.push_back(reproduce(f, c, false, false));
  } else if (id == "trace-mode-mismatch") {
    const bool want_train = c.mode == Mode::Train;
    f.fixes.push_back({"trace-in-scan-mode",
                       std::string("trace in ") + (want_train ? "train" : "eval") + " mode",
                       std::string("model.") + (want_train ? "train()" : "eval()") +
                           "; torch.jit.trace(model, example_batch).save(path)",
                       "a traced archive keeps the mode it was traced in: keep one archive per mode", {}});
    f.fixes.push_back({"script-instead", "script the model: the mode then follows model.train()/eval()",
                       "torch.jit.script(model).save(path)", "needs code TorchScript can compile", {}});
  } else if (id == "forward-error" && f.evidence.contains("index_fault")) {
    // An index past its bound inside forward, read where the op was given it (a loss computed
    // in forward, minGPT's): the fixes of its kind, never those of a value range.
    const auto& ix = f.evidence["index_fault"];
    const std::string what = ix.value("what", std::string());
    if (what == "token id") {
      token_id_fixes(f.fixes, ix.value("value", int64_t{0}), ix.value("num_embeddings", int64_t{0}), ix.value("module", std::string()));
    } else if (what == "index") {
      dimension_index_fixes(f.fixes, ix.value("value", int64_t{0}), ix.value("size", int64_t{0}));
    } else if (what == "class value") {
      // A one-hot made of the labels (F.one_hot, a scatter_ into [N, classes]): the label past
      // the classes, remapped or the head widened; nothing there takes an ignore_index.
      const double value = ix.value("value", 0.0);
      const double classes = ix.contains("num_classes") ? ix.value("num_classes", 0.0) : ix.value("size", 0.0);
      class_index_fixes(f.fixes, value, classes, "", number_at(ix, "smallest"));
    } else if (what == "class index") {
      const double value = ix.value("value", 0.0);
      const std::string v = format_number(value);
      // A loss computed inside forward (transformers') takes no ignore_index from the user: the
      // label itself becomes -100, cross_entropy's default ignore_index.
      const std::string ignore =
          c.loss.type == LossType::Model
              ? "labels = labels.masked_fill(labels == " + v + ", -100)  # before forward: its loss ignores -100 (cross_entropy's default)"
              : ignore_index_call(ix.value("op", std::string()), v);
      class_index_fixes(f.fixes, value, ix.value("classes", 0.0), ignore, number_at(ix, "smallest"));
    }
    f.fixes.push_back(reproduce(f, c, false, false));
  } else {
    if (id == "forward-error" && f.evidence.contains("cause") && f.evidence["cause"] == "input-dtype") {
      f.fixes.push_back({"cast-inputs", "feed float32 inputs, as the model's weights are",
                         "x = x.float()  # or np.float32 when the data is written", "halves the data's memory", {}});
    }
    maybe_tail();
    f.fixes.push_back(reproduce(f, c, id != "forward-error", false));
  }
}

}  // namespace batchcheck
