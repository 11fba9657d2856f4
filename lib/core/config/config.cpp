#include "core/config/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/base/errors.h"
#include "core/base/json_input.h"
#include "core/base/text.h"
#include "core/config/config_parts.h"

namespace batchcheck {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct LossName {
  const char* name;
  LossType type;
};
constexpr LossName kLossNames[] = {
    {"bce", LossType::Bce},     {"bce_with_logits", LossType::BceWithLogits},
    {"cross_entropy", LossType::CrossEntropy}, {"nll", LossType::Nll},
    {"mse", LossType::Mse},     {"l1", LossType::L1},
    {"smooth_l1", LossType::SmoothL1},         {"none", LossType::None},
    {"model", LossType::Model}, {"step", LossType::Step},
    {"dice", LossType::Dice},   {"dice_ce", LossType::DiceCe},
    {"jaccard", LossType::Jaccard},            {"focal", LossType::Focal},
};

}  // namespace

std::string resolve_path(const std::string& base_dir, const std::string& p) {
  fs::path path(p);
  if (path.is_absolute() || base_dir.empty()) return path.lexically_normal().string();
  return (fs::path(base_dir) / path).lexically_normal().string();
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<Range> parse_range(const JsonObject& obj, const std::string& key) {
  auto values = obj.number_list(key);
  if (!values) return std::nullopt;
  if (values->size() != 2) {
    obj.fail(key, "expected [low, high], got an array of " + std::to_string(values->size()) + " numbers");
  }
  Range r{(*values)[0], (*values)[1]};
  if (r.lo > r.hi) {
    obj.fail(key, "low bound " + format_number(r.lo) + " is greater than high bound " + format_number(r.hi));
  }
  return r;
}

void parse_model(const JsonObject& m, const std::string& base, ModelConfig& out) {
  m.reject_unknown({"path", "format", "mode", "output", "inputs", "libraries", "trains_exported", "call"});
  parse_inputs(m, out);
  if (const json* libs = m.find("libraries")) {
    if (!libs->is_array()) m.fail("libraries", "expected an array of shared library paths (.so), got " + describe_json(*libs));
    for (std::size_t i = 0; i < libs->size(); ++i) {
      const json& l = (*libs)[i];
      if (!l.is_string() || l.get<std::string>().empty()) {
        m.fail("libraries[" + std::to_string(i) + "]", "expected a shared library path, got " + describe_json(l));
      }
      out.libraries_display.push_back(l.get<std::string>());
      out.libraries.push_back(resolve_path(base, l.get<std::string>()));
    }
  }
  auto format = m.choice("format", {"torchscript", "pt2", "eager"});
  if (format == "eager") {
    // batchcheck.scan() ran forward itself: no file, the prediction comes with each batch.
    if (m.has("path")) m.fail("path", "not used with format \"eager\": the prediction comes from the Python process with each batch");
    out.format = ModelFormat::Eager;
  } else {
    const std::string path = m.required_string("path");
    out.path = resolve_path(base, path);
    const bool pt2 = format ? *format == "pt2" : path.size() > 4 && path.compare(path.size() - 4, 4, ".pt2") == 0;
    out.format = pt2 ? ModelFormat::Pt2 : ModelFormat::TorchScript;
  }
  auto mode = m.choice("mode", {"train", "eval"});
  if (mode) out.mode = *mode == "train" ? Mode::Train : Mode::Eval;
  if (out.format == ModelFormat::Pt2) {
    if (mode == "train") m.fail("mode", std::string(kPt2NoTrain));
    out.mode = Mode::Eval;
  }
  out.trains_exported = m.boolean("trains_exported").value_or(false);
  if (out.trains_exported && out.format != ModelFormat::Pt2) {
    m.fail("trains_exported", "only a .pt2 program can be the one training runs; a TorchScript archive is always checked "
                              "as the model you train");
  }
  if (const json* o = m.find("output")) {
    if (o->is_string()) {
      out.output = o->get<std::string>();
    } else if (o->is_number_integer()) {
      out.output = o->get<int64_t>();
    } else {
      m.fail("output", "expected an integer index or a string key, got " + describe_json(*o));
    }
  }
  if (const std::optional<JsonObject> c = m.optional_object("call")) {
    c->reject_unknown({"forward", "select", "targets", "loss"});
    out.call = {c->required_string("forward"), c->string("select").value_or(""), c->string("targets").value_or(""),
                c->string("loss").value_or("")};
  }
}

void parse_data(const JsonObject& d, const std::string& base, DataConfig& out) {
  d.reject_unknown({"format", "inputs", "targets", "path", "transform"});
  auto format = d.choice("format", {"npy", "pt", "imagefolder", "stream"});
  if (format == "stream") {
    // batchcheck.scan() writes this: `path` is the Unix socket its Python process serves the
    // user's own DataLoader on, batch by batch; fields are named as in a .pt file.
    for (const char* key : {"inputs", "transform"}) {
      if (d.has(key)) d.fail(key, "not used with format \"stream\": the batches' fields are what the Python loader yields");
    }
    out.format = DataFormat::Stream;
    out.path_display = d.required_string("path");
    out.path = out.path_display;
    out.inputs = "inputs";
    out.has_targets = true;
    out.targets = d.string("targets").value_or("targets");
    out.targets_explicit = d.has("targets");
    return;
  }
  if (format == "imagefolder") {
    out.format = DataFormat::ImageFolder;
    for (const char* key : {"inputs", "targets"}) {
      if (d.has(key)) d.fail(key, "not used with format \"imagefolder\": its samples are (image, class index), the classes its sub-folders");
    }
    out.path_display = d.required_string("path");
    out.path = resolve_path(base, out.path_display);
    out.inputs = "inputs";
    out.targets = "targets";
    if (d.has("transform")) parse_image_transform(d, out.transform);
    return;
  }
  if (d.has("transform")) d.fail("transform", "only used with format \"imagefolder\" (torchvision's image transforms)");
  auto path = d.string("path");
  const json* inputs_value = d.find("inputs");
  // {"values": "v.npy", "offsets": "o.npy"}: one variable-length field (else a field map).
  auto ragged = [](const json* v) { return v && v->is_object() && v->size() == 2 && v->contains("values") && v->contains("offsets"); };
  // Reads a ragged field's two files: values (resolved, displayed), offsets (resolved, displayed).
  auto ragged_files = [&](const JsonObject& spec, std::string& values, std::string& values_display, std::string& offsets,
                          std::string& offsets_display) {
    values_display = spec.required_string("values");
    offsets_display = spec.required_string("offsets");
    if (values_display.empty()) spec.fail("values", "expected a .npy file name");
    if (offsets_display.empty()) spec.fail("offsets", "expected a .npy file name");
    values = resolve_path(base, values_display);
    offsets = resolve_path(base, offsets_display);
  };
  const bool inputs_ragged = ragged(inputs_value);
  const bool inputs_map = inputs_value && inputs_value->is_object() && !inputs_ragged;
  if ((inputs_map || inputs_ragged) && (format == "pt" || path)) {
    d.fail("inputs", "an object of field -> file is for .npy files; a .pt file names its keys in model.inputs");
  }
  if (inputs_ragged) {
    ragged_files(d.object("inputs"), out.inputs, out.inputs_display, out.inputs_offsets, out.inputs_offsets_display);
    format = "npy";
  }
  if (inputs_map) {
    if (inputs_value->empty()) d.fail("inputs", "expected at least one field -> .npy file");
    const JsonObject map = d.object("inputs");
    for (const auto& item : inputs_value->items()) {
      out.field_names.push_back(item.key());
      if (ragged(&item.value())) {
        std::string values, values_display, offsets, offsets_display;
        ragged_files(map.object(item.key()), values, values_display, offsets, offsets_display);
        out.field_displays.push_back(values_display);
        out.field_files.push_back(values);
        out.field_offsets.push_back(offsets);
        out.field_offsets_displays.push_back(offsets_display);
        continue;
      }
      if (!item.value().is_string() || item.value().get<std::string>().empty()) {
        d.fail("inputs." + item.key(), "expected a .npy file name, or {\"values\": ..., \"offsets\": ...} for a variable-length field, got " +
                                           describe_json(item.value()));
      }
      out.field_displays.push_back(item.value().get<std::string>());
      out.field_files.push_back(resolve_path(base, item.value().get<std::string>()));
      out.field_offsets.emplace_back();
      out.field_offsets_displays.emplace_back();
    }
    format = "npy";
  }
  auto inputs = inputs_map      ? std::optional<std::string>(out.field_displays.front())
                : inputs_ragged ? std::optional<std::string>(out.inputs_display)
                                : d.string("inputs");
  if (!format) {
    // Inferred from the file extension, as SPEC.md promises.
    if (path && (ends_with(*path, ".pt") || ends_with(*path, ".pth"))) {
      format = "pt";
    } else if (inputs && ends_with(*inputs, ".npy")) {
      format = "npy";
    } else if (path || inputs) {
      d.fail("format", "cannot infer the format from the file extension; set \"format\" to \"npy\", \"pt\" or \"imagefolder\"");
    } else {
      d.fail("inputs", "missing required key");
    }
  }
  out.format = *format == "npy" ? DataFormat::Npy : DataFormat::Pt;
  if (out.format == DataFormat::Npy) {
    if (path) d.fail("path", "not used with format \"npy\"; name the files in \"inputs\" and \"targets\"");
    if (!inputs_ragged) {
      out.inputs_display = inputs_map ? out.field_displays.front() : d.required_string("inputs");
      out.inputs = resolve_path(base, out.inputs_display);
    }
    const json* targets_value = d.find("targets");
    if (ragged(targets_value)) {
      ragged_files(d.object("targets"), out.targets, out.targets_display, out.targets_offsets, out.targets_offsets_display);
      out.has_targets = true;
      return;
    }
    auto targets = d.string("targets");
    out.has_targets = targets.has_value();
    if (targets) {
      if (targets->empty()) d.fail("targets", "expected a non-empty string");
      out.targets_display = *targets;
      out.targets = resolve_path(base, *targets);
    }
  } else {
    out.path_display = d.required_string("path");
    out.path = resolve_path(base, out.path_display);
    out.inputs = inputs.value_or("inputs");
    // An explicit key must exist in the file; the default one may be absent (no targets).
    out.has_targets = true;
    out.targets = d.string("targets").value_or("targets");
    out.targets_explicit = d.has("targets");
  }
}


namespace {

// The keys of the region losses (dice, dice_ce, jaccard, focal), and the keys of the others
// they do not take.
void parse_region_loss(const JsonObject& l, LossConfig& out) {
  const bool region = is_region_loss(out.type);
  const std::string only = "only used with the region losses (type \"dice\", \"dice_ce\", \"jaccard\", \"focal\")";
  if (auto a = l.choice("activation", {"none", "sigmoid", "softmax"})) {
    if (!region) l.fail("activation", only);
    out.activation = *a == "sigmoid" ? Activation::Sigmoid : *a == "softmax" ? Activation::Softmax : Activation::None;
  }
  if (auto f = l.choice("target_format", {"mask", "binary", "index", "classes"})) {
    if (!region) l.fail("target_format", only);
    out.target_format = *f == "mask" ? TargetFormat::Mask : *f == "binary" ? TargetFormat::Binary
                        : *f == "index"                   ? TargetFormat::Index
                                                          : TargetFormat::Classes;
  }
  for (const char* key : {"gamma", "alpha"}) {
    auto v = l.number(key);
    if (!v) continue;
    if (out.type != LossType::Focal) l.fail(key, "only used with type \"focal\"");
    if (*v < 0 || (std::string(key) == "alpha" && *v > 1)) {
      l.fail(key, std::string("expected a number in ") + (std::string(key) == "alpha" ? "[0, 1]" : "[0, inf)") + ", got " + format_number(*v));
    }
    if (std::string(key) == "gamma") out.gamma = *v;
    else out.alpha = *v;
  }
  if (!region) return;
  for (const char* key : {"weight", "pos_weight", "label_smoothing", "beta"}) {
    if (l.has(key)) l.fail(key, std::string("not used by type \"") + to_string(out.type) + "\" (batchcheck checks its targets, not its weighting)");
  }
  if (out.activation == Activation::Softmax && out.target_format == TargetFormat::Binary) {
    l.fail("activation", "\"softmax\" over the one channel of a \"binary\" target is 1 everywhere: use \"sigmoid\"");
  }
}

}  // namespace

void parse_loss(const JsonObject& l, LossConfig& out) {
  l.reject_unknown({"type", "target", "ignore_index", "reduction", "weight", "pos_weight", "label_smoothing", "beta", "aux",
                    "activation", "target_format", "gamma", "alpha"});
  if (auto target = l.string("target")) {
    if (target->empty()) l.fail("target", "expected a field name");
    out.target = *target;
  }
  auto type = l.choice("type", loss_type_names());
  if (!type) l.fail("type", "missing required key");
  out.type = *parse_loss_type(*type);
  if (auto ii = l.integer("ignore_index")) {
    out.ignore_index = *ii;
    out.ignore_index_given = true;
  }
  if (auto r = l.choice("reduction", {"mean", "sum", "none"})) {
    out.reduction = *r == "mean" ? Reduction::Mean : *r == "sum" ? Reduction::Sum : Reduction::None;
  }
  parse_region_loss(l, out);
  if (auto w = l.number_list("weight")) out.weight = *w;
  if (const json* pw = l.find("pos_weight")) {
    if (pw->is_number()) {
      out.pos_weight = {pw->get<double>()};
    } else {
      out.pos_weight = *l.number_list("pos_weight");
    }
    if (out.type != LossType::BceWithLogits) l.fail("pos_weight", "only used with type \"bce_with_logits\"");
  }
  if (auto ls = l.number("label_smoothing")) {
    if (*ls < 0 || *ls > 1) l.fail("label_smoothing", "expected a number in [0, 1], got " + format_number(*ls));
    out.label_smoothing = *ls;
  }
  if (auto b = l.number("beta")) {
    if (*b < 0) l.fail("beta", "expected a non-negative number, got " + format_number(*b));
    out.beta = *b;
  }
  if (const json* aux = l.find("aux")) {
    if (!aux->is_object() || aux->empty()) {
      l.fail("aux", "expected an object of extra outputs and their weights, e.g. {\"aux\": 0.5} (a dict key, or a "
                    "tuple index as \"1\"), got " + describe_json(*aux));
    }
    for (const auto& item : aux->items()) {
      const json& w = item.value();
      if (item.key().empty()) l.fail("aux", "an empty output key");
      if (!w.is_number() || !std::isfinite(w.get<double>()) || w.get<double>() < 0) {
        l.fail("aux." + item.key(), "expected the output's weight in the loss, a non-negative number, got " + describe_json(w));
      }
      out.aux.emplace_back(item.key(), w.get<double>());
    }
    if (out.type == LossType::None || returns_loss(out.type)) {
      l.fail("aux", std::string("needs a loss \"type\" batchcheck computes: each extra output is compared with the target by that loss") +
                        (returns_loss(out.type) ? " (with \"" + std::string(to_string(out.type)) + "\", forward's own loss already adds its heads)" : ""));
    }
  }
}

// loss.aux selects outputs the way model.output selects the prediction.
void check_aux_outputs(const JsonObject& top, const Config& cfg) {
  // model.format "eager": batchcheck.scan() selected each output in the user's process.
  if (cfg.loss.aux.empty() || cfg.model.format == ModelFormat::Eager) return;
  const JsonObject loss = top.object("loss");
  const auto& out = cfg.model.output;
  if (!out) {
    loss.fail("aux", "needs model.output: the model returns several outputs, and model.output names the prediction among them");
  }
  for (const auto& [key, weight] : cfg.loss.aux) {
    if (std::holds_alternative<int64_t>(*out)) {
      const auto magnitude = parse_u64(key[0] == '-' ? key.substr(1) : key);
      if (!magnitude) {
        loss.fail("aux." + key, "model.output is an index, so the model returns a tuple or list: name each extra output by its index (\"1\")");
      }
      if (*magnitude > 1000000) loss.fail("aux." + key, "is not an index of a tuple the model could return");
    }
    const bool same = std::holds_alternative<std::string>(*out) ? std::get<std::string>(*out) == key
                                                                : std::to_string(std::get<int64_t>(*out)) == key;
    if (same) loss.fail("aux." + key, "is model.output, the prediction itself; list only the extra outputs");
  }
}

void parse_checks(const JsonObject& c, ChecksConfig& out, const ModelConfig& model) {
  c.reject_unknown({"output_range", "target_range", "probe_batch_sizes", "max_batches", "backward", "root_cause", "half_headroom"});
  out.output_range = parse_range(c, "output_range");
  out.target_range = parse_range(c, "target_range");
  // Each probe is a forward on a fresh model: a list this long is a mistake, not a plan.
  // Counted on the parsed array, before a vector is built from it. A probe's size needs no
  // bound of its own: sizes above the dataset's sample count are skipped.
  if (const json* p = c.find("probe_batch_sizes"); p && p->is_array() && p->size() > kMaxProbeSizes) {
    c.fail("probe_batch_sizes", "at most " + std::to_string(kMaxProbeSizes) + " probe sizes, got " + std::to_string(p->size()));
  }
  if (auto p = c.uint_list("probe_batch_sizes", 1)) out.probe_batch_sizes = *p;
  out.max_batches = c.uint("max_batches").value_or(0);
  out.backward = c.boolean("backward");
  out.root_cause = c.boolean("root_cause").value_or(true);
  if (const json* h = c.find("half_headroom")) {
    if (!h->is_number() || !(h->get<double>() > 0.0 && h->get<double>() <= 1.0)) {  // NaN fails too
      c.fail("half_headroom", "expected a share of float16's range (65,504) above 0 and at most 1, e.g. 0.5");
    }
    out.half_headroom = h->get<double>();
  }
  if (model.format == ModelFormat::Pt2 && out.backward.value_or(false)) {
    c.fail("backward", "a .pt2 program (AOTInductor) has no autograd: backward runs only with a TorchScript archive");
  }
  if (model.format == ModelFormat::Eager && out.backward.value_or(false)) {
    c.fail("backward", "an eager forward's graph stays in the Python process: backward runs only with a TorchScript archive");
  }
}

}  // namespace

bool backward_enabled(const Config& cfg) {
  // An eager model's gradients are not here; an eager step's come from the user's process.
  if (cfg.model.format == ModelFormat::Eager && cfg.loss.type != LossType::Step) return false;
  return cfg.checks.backward.value_or(cfg.model.mode == Mode::Train);
}

const char* to_string(SamplerKind k) {
  switch (k) {
    case SamplerKind::Sequential: return "sequential";
    case SamplerKind::Random: return "random";
    case SamplerKind::Distributed: return "distributed";
  }
  return "sequential";
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
    case Precision::Fp32: break;
  }
  return "fp32";
}

const char* dtype_name(Precision p) {
  switch (p) {
    case Precision::Fp16: return "float16";
    case Precision::Bf16: return "bfloat16";
    case Precision::Fp32: break;
  }
  return "float32";
}

std::optional<Precision> parse_precision(const std::string& s) {
  if (s == "fp32" || s == "32") return Precision::Fp32;
  if (s == "fp16" || s == "16") return Precision::Fp16;
  if (s == "bf16") return Precision::Bf16;
  return std::nullopt;
}

const char* to_string(Mode m) { return m == Mode::Train ? "train" : "eval"; }

const char* to_string(LossType t) {
  for (const auto& n : kLossNames) {
    if (n.type == t) return n.name;
  }
  return "none";
}

bool is_region_loss(LossType t) {
  return t == LossType::Dice || t == LossType::DiceCe || t == LossType::Jaccard || t == LossType::Focal;
}

const char* to_string(Activation a) {
  switch (a) {
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Softmax: return "softmax";
    case Activation::None: break;
  }
  return "none";
}

const char* to_string(TargetFormat f) {
  switch (f) {
    case TargetFormat::Binary: return "binary";
    case TargetFormat::Index: return "index";
    case TargetFormat::Classes: return "classes";
    case TargetFormat::Mask: break;
  }
  return "mask";
}

const char* to_string(Reduction r) {
  switch (r) {
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
    case Reduction::None: return "none";
  }
  return "mean";
}

const char* to_string(DataFormat f) {
  switch (f) {
    case DataFormat::Npy: return "npy";
    case DataFormat::Pt: return "pt";
    case DataFormat::ImageFolder: return "imagefolder";
    case DataFormat::Stream: return "stream";
  }
  return "npy";
}

std::optional<LossType> parse_loss_type(const std::string& s) {
  for (const auto& n : kLossNames) {
    if (s == n.name) return n.type;
  }
  return std::nullopt;
}

const std::vector<std::string>& loss_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& n : kLossNames) v.emplace_back(n.name);
    return v;
  }();
  return names;
}

bool valid_device(const std::string& device) {
  if (device == "cpu" || device == "cuda" || device == "auto") return true;
  if (device.rfind("cuda:", 0) == 0) {
    auto n = parse_u64(device.substr(5));
    return n && *n < 1024;
  }
  return false;
}

namespace {

// "precision": "fp16", or {"dtype": "fp16", "casts": "recorded"} where the model's graph holds
// its casts (batchcheck.scan() of a step that enters torch.autocast writes it).
void parse_precision_key(const JsonObject& top, Config& cfg) {
  const json* p = top.find("precision");
  if (!p) return;
  std::string name;
  if (p->is_object()) {
    JsonObject o = top.object("precision");
    o.reject_unknown({"dtype", "casts", "source", "bce_in_step"});
    cfg.precision.bce_in_step = o.boolean("bce_in_step").value_or(false);
    name = o.string("dtype").value_or("");
    if (name.empty()) o.fail("dtype", "expected fp32, fp16 or bf16");
    if (auto casts = o.string("casts")) {
      if (*casts != "autocast" && *casts != "recorded") {
        o.fail("casts", "expected \"autocast\" (the engine enters torch.autocast) or \"recorded\" (the model's graph holds its casts)");
      }
      cfg.precision.recorded = *casts == "recorded";
    }
  } else {
    name = top.string("precision").value_or("");
  }
  const std::optional<Precision> d = parse_precision(name);
  if (!d) top.fail("precision", "unknown precision \"" + excerpt(name) + "\" (expected fp32, fp16 or bf16)");
  cfg.precision.dtype = *d;
  cfg.precision.from = "the config's precision";
  if (p->is_object()) {
    // Where batchcheck.scan() was asked (scan(precision="fp16"), the step's own autocast).
    if (auto source = top.object("precision").string("source")) {
      if (source->empty() || utf8_length(*source) > 200) {
        top.object("precision").fail("source", "expected a description of 1 to 200 characters");
      }
      cfg.precision.from = single_line(*source);
    }
  }
  if (cfg.model.format == ModelFormat::Pt2 && *d != Precision::Fp32) top.fail("precision", std::string(kPt2NoPrecision));
}

Config config_from_json(const std::string& display_path, const json& root, const std::string& base_dir) {
  JsonObject top(display_path, "", root);
  top.reject_unknown({"model", "data", "loader", "loss", "checks", "device", "sync", "source", "precision"});

  Config cfg;
  cfg.file = display_path;
  if (const std::optional<std::string> source = top.string("source")) {
    if (source->empty() || utf8_length(*source) > 300) top.fail("source", "expected a description of 1 to 300 characters");
    cfg.source = single_line(*source);
  }
  parse_model(top.object("model"), base_dir, cfg.model);
  parse_data(top.object("data"), base_dir, cfg.data);
  if (cfg.model.format == ModelFormat::Eager && cfg.data.format != DataFormat::Stream) {
    top.object("model").fail("format", "\"eager\" takes its predictions from batchcheck.scan() (data.format \"stream\"), not from a file");
  }
  parse_loader(top.object("loader"), base_dir, cfg.loader);
  if (auto loss = top.optional_object("loss")) parse_loss(*loss, cfg.loss);
  if (auto checks = top.optional_object("checks")) parse_checks(*checks, cfg.checks, cfg.model);
  if (auto device = top.string("device")) {
    if (!valid_device(*device)) {
      top.fail("device", "unknown device \"" + *device + "\" (expected cpu, cuda, cuda:N or auto)");
    }
    cfg.device = *device;
  }
  cfg.sync = top.boolean("sync").value_or(true);
  parse_precision_key(top, cfg);
  apply_loss_target(top, cfg);
  check_aux_outputs(top, cfg);
  check_fields(top, cfg);
  return cfg;
}
}  // namespace

namespace {

// A config holds a few KB of settings; its longest lists (loss.weight, one number per class)
// take a few MB even for 100k classes. Refusing larger files before parsing bounds what the
// parsed JSON can take (a few dozen bytes per value: at most a few hundred MB) whatever the
// file holds, e.g. a list of 50 million probe sizes.
constexpr uint64_t kMaxConfigBytes = uint64_t{8} << 20;

void check_config_size(const std::string& display_path, uint64_t bytes) {
  if (bytes <= kMaxConfigBytes) return;
  throw InputError(display_path, "",
                   "the file is " + std::to_string(bytes) + " bytes (" + format_bytes(bytes) + "); a config file may be at most " +
                       format_bytes(kMaxConfigBytes) + " (" + std::to_string(kMaxConfigBytes) +
                       " bytes): its settings take a few KB, its longest lists (loss.weight, one value per class) a few MB");
}

}  // namespace

Config parse_config(const std::string& display_path, const std::string& text, const std::string& base_dir) {
  check_config_size(display_path, text.size());
  Config cfg = config_from_json(display_path, parse_json_text(display_path, text), base_dir);
  cfg.text = text;
  return cfg;
}

Config load_config(const std::string& path) {
  // Refused before reading when the file says its size; the text is checked again in case
  // it grew meanwhile. read_json_file reports unreadable files, directories and syntax errors.
  std::error_code ec;
  const auto size = fs::is_regular_file(path, ec) ? fs::file_size(path, ec) : 0;
  if (!ec) check_config_size(path, size);
  const std::string text = read_text_file(path, path);
  check_config_size(path, text.size());
  Config cfg = config_from_json(path, parse_json_text(path, text), fs::path(path).parent_path().string());
  cfg.text = text;
  return cfg;
}

}  // namespace batchcheck
