#include <algorithm>
#include <memory>

#include "core/base/errors.h"
#include "core/base/limits.h"
#include "core/base/text.h"
#include "core/config/config_parts.h"
#include "core/parse/order.h"

namespace batchcheck {

using nlohmann::json;

namespace {

// Fields a batch carries (model.inputs, data.inputs, collate.pad, collate.mask): each is a
// tensor of every batch, and of .npy data a file held open. A forward takes a few dozen at
// most; bounding them also keeps the cross-checks between these lists (each against each) cheap.
constexpr std::size_t kMaxFields = 1024;

void check_field_count(const JsonObject& o, const std::string& key, std::size_t n, const std::string& what) {
  if (n > kMaxFields) {
    o.fail(key, "at most " + std::to_string(kMaxFields) + " " + what + ", got " + std::to_string(n) +
                    ": each is a tensor of every batch");
  }
}

// "collate": "default", or {"pad": {"inputs": 0, "targets": -100}, "pad_to_multiple_of": 8}.
void parse_collate(const JsonObject& l, CollateConfig& out) {
  const json* c = l.find("collate");
  if (!c) return;
  if (c->is_string()) {
    if (c->get<std::string>() == "pad") {
      l.fail("collate", "a padding collate needs each padded field's value: {\"pad\": {\"inputs\": 0}}");
    }
    l.choice("collate", {"default"});
    return;
  }
  if (!c->is_object()) l.fail("collate", "expected \"default\" or an object such as {\"pad\": {\"inputs\": 0}}, got " + describe_json(*c));
  const JsonObject co = l.object("collate");
  co.reject_unknown({"pad", "pad_to_multiple_of", "mask", "list"});
  if (auto list = co.boolean("list")) {
    out.list = *list;
    if (out.list && (co.has("pad") || co.has("mask"))) {
      co.fail("list", "keeps each sample apart, so there is nothing to pad or mask: remove \"pad\" and \"mask\"");
    }
  }
  if (co.has("pad")) {
    const JsonObject pad = co.object("pad");
    const json& fields = *co.find("pad");
    if (!fields.is_object()) co.fail("pad", "expected an object of field -> padding value, e.g. {\"inputs\": 0}, got " + describe_json(fields));
    check_field_count(co, "pad", fields.size(), "padded fields");
    for (const auto& item : fields.items()) {
      if (auto v = pad.number(item.key())) out.pad.emplace_back(item.key(), *v);
    }
    if (!out.pads()) co.fail("pad", "name a field to pad with its padding value, e.g. {\"inputs\": 0}");
  }
  if (auto m = co.uint("pad_to_multiple_of", 1)) {
    if (!out.pads()) co.fail("pad_to_multiple_of", "only used with \"pad\" (the lengths of padded fields are rounded up)");
    // Every padded field of a batch is rounded up to a multiple of it, so it sizes each
    // batch: 8 to 128 is what tensor cores want, a model's whole context (4096, 128k tokens)
    // the most anyone pads to; 2^20 stays far above that and keeps the rounding in int64.
    constexpr uint64_t kMaxPadMultiple = uint64_t{1} << 20;
    if (*m > kMaxPadMultiple) {
      co.fail("pad_to_multiple_of", "expected at most " + std::to_string(kMaxPadMultiple) + " (2^20), got " + std::to_string(*m) +
                                        ": every padded field of a batch is rounded up to a multiple of it, so one int64 sample "
                                        "alone would take " + format_bytes(static_cast<long double>(*m) * 8));
    }
    out.pad_to_multiple_of = *m;
  }
  if (co.has("mask")) {
    const json& masks = *co.find("mask");
    if (!masks.is_object() || masks.empty()) {
      co.fail("mask", "expected an object of generated field -> padded field, e.g. {\"attention_mask\": \"input_ids\"}, got " + describe_json(masks));
    }
    check_field_count(co, "mask", masks.size(), "generated masks");
    const JsonObject mo = co.object("mask");
    for (const auto& item : masks.items()) {
      if (!item.value().is_string()) mo.fail(item.key(), "expected the name of a padded field, got " + describe_json(item.value()));
      const std::string source = item.value().get<std::string>();
      if (!out.pad_for(source, false)) {
        mo.fail(item.key(), "marks the padding of \"" + source + "\", which \"pad\" does not pad: add {\"" + source + "\": 0} to it");
      }
      for (const auto& [name, value] : out.pad) {
        (void)value;
        if (name == item.key()) mo.fail(item.key(), "is generated, so it is not padded: remove it from \"pad\"");
      }
      out.masks.emplace_back(item.key(), source);
    }
  }
}

// 224, [224], or [height, width], as transforms.Resize / CenterCrop take them.
ImageSize parse_image_size(const JsonObject& t, const std::string& key, bool smaller_edge_allowed) {
  constexpr uint64_t kMaxSide = 16384;
  const json& v = *t.find(key);
  const std::string example = smaller_edge_allowed ? "256 (the smaller edge) or [height, width]" : "224 or [height, width]";
  ImageSize size;
  std::vector<uint64_t> sides;
  if (v.is_number_unsigned()) {
    sides.push_back(v.get<uint64_t>());
  } else if (v.is_array() && (v.size() == 1 || v.size() == 2) && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number_unsigned(); })) {
    for (const auto& x : v) sides.push_back(x.get<uint64_t>());
  } else {
    t.fail(key, "expected " + example + ", got " + describe_json(v));
  }
  for (uint64_t s : sides) {
    if (s < 1 || s > kMaxSide) t.fail(key, "expected sizes in [1, " + std::to_string(kMaxSide) + "], got " + std::to_string(s));
  }
  // Each image of a batch is this size (at least, for a smaller edge) as the float32 RGB tensor
  // ToTensor makes, 12 bytes a pixel: 8192 x 8192 (768 MiB an image) is beyond any model's input.
  constexpr uint64_t kMaxPixels = uint64_t{1} << 26;
  const uint64_t pixels = sides.front() * sides.back();
  if (pixels > kMaxPixels) {
    const std::string side = std::to_string(sides.front()), area = side + " x " + std::to_string(sides.back());
    t.fail(key, (sides.size() == 1 && smaller_edge_allowed ? "a smaller edge of " + side + " makes at least " + area + " = "
                                                           : area + " is ") +
                    std::to_string(pixels) + " pixels, at most " + std::to_string(kMaxPixels) + " (8192 x 8192): ToTensor makes 12 bytes a pixel (3 float32 "
                    "channels), so one image would take " + format_bytes(static_cast<long double>(pixels) * 12));
  }
  size.height = static_cast<int>(sides.front());
  size.width = static_cast<int>(sides.back());
  size.smaller_edge = smaller_edge_allowed && sides.size() == 1;
  return size;
}

}  // namespace

void parse_image_transform(const JsonObject& d, ImageTransform& out) {
  const JsonObject t = d.object("transform");
  t.reject_unknown({"resize", "interpolation", "center_crop", "normalize"});
  if (t.has("resize")) out.resize = parse_image_size(t, "resize", true);
  if (auto i = t.choice("interpolation", {"bilinear", "bicubic"})) {
    if (!out.resize) t.fail("interpolation", "only used with \"resize\"");
    out.interpolation = *i == "bicubic" ? Interpolation::Bicubic : Interpolation::Bilinear;
  }
  if (t.has("center_crop")) out.center_crop = parse_image_size(t, "center_crop", false);
  if (t.has("normalize")) {
    const JsonObject n = t.object("normalize");
    n.reject_unknown({"mean", "std"});
    for (const char* key : {"mean", "std"}) {
      auto values = n.number_list(key);
      if (!values) n.fail(key, "missing required key (one value per channel: [r, g, b])");
      if (values->size() != 3 && values->size() != 1) {
        n.fail(key, "expected 3 values (r, g, b) or 1 for every channel, got " + std::to_string(values->size()));
      }
      if (values->size() == 1) values->assign(3, values->front());
      (std::string(key) == "mean" ? out.mean : out.std) = *values;
    }
    for (double s : out.std) {
      // torchvision raises at every sample: "std evaluated to zero ..., leading to division by zero."
      if (s == 0) n.fail("std", "a standard deviation of 0 divides by zero (torchvision's Normalize raises at every sample)");
    }
  }
}

// "inputs": ["a", "b"] | {"arg": "field", ...} | "record".
void parse_inputs(const JsonObject& m, ModelConfig& out) {
  const json* v = m.find("inputs");
  if (!v) return;
  if (v->is_array() || v->is_object()) check_field_count(m, "inputs", v->size(), "inputs");
  auto field = [&](const json& e, const std::string& where) {
    if (!e.is_string() || e.get<std::string>().empty()) m.fail(where, "expected a field name (a non-empty string), got " + describe_json(e));
    return e.get<std::string>();
  };
  if (v->is_string()) {
    if (v->get<std::string>() != "record") {
      m.fail("inputs", "expected \"record\" (the whole record as one Dict[str, Tensor] argument), a list of fields or "
                       "an object of argument -> field, got " + describe_json(*v));
    }
    out.inputs_kind = InputsKind::Record;
  } else if (v->is_array()) {
    if (v->empty()) m.fail("inputs", "expected at least one field");
    out.inputs_kind = InputsKind::Positional;
    for (std::size_t i = 0; i < v->size(); ++i) out.input_fields.push_back(field((*v)[i], "inputs[" + std::to_string(i) + "]"));
  } else if (v->is_object()) {
    if (v->empty()) m.fail("inputs", "expected at least one argument -> field");
    out.inputs_kind = InputsKind::Named;
    for (const auto& item : v->items()) {
      out.input_args.push_back(item.key());
      out.input_fields.push_back(field(item.value(), "inputs." + item.key()));
    }
  } else {
    m.fail("inputs", "expected a list of fields, an object of argument -> field, or \"record\", got " + describe_json(*v));
  }
  for (std::size_t i = 0; i < out.input_fields.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (out.input_fields[i] == out.input_fields[j] && out.inputs_kind == InputsKind::Positional) {
        m.fail("inputs[" + std::to_string(i) + "]", "the field \"" + out.input_fields[i] + "\" is already inputs[" + std::to_string(j) + "]");
      }
    }
  }
}


void parse_loader(const JsonObject& l, const std::string& base, LoaderConfig& out) {
  // DataLoader arguments that only change how fast batches arrive, never which samples
  // they hold: accepted (a user pastes their DataLoader call) and named in the report.
  static const std::vector<std::string> kNoEffect = {"num_workers", "pin_memory", "persistent_workers",
                                                     "prefetch_factor", "timeout", "pin_memory_device"};
  std::vector<std::string> known = {"batch_size", "drop_last", "sampler", "shuffle", "seed", "epoch", "world_size",
                                    "sampler_drop_last", "accumulation_steps", "collate", "order", "order_name", "order_rank",
                                    "collate_fn"};
  known.insert(known.end(), kNoEffect.begin(), kNoEffect.end());
  l.reject_unknown(known);
  if (const std::optional<std::string> fn = l.string("collate_fn")) {
    // It becomes Python code in a fix: a dotted name of identifiers (Python 3's letters beyond
    // ASCII too: a valid UTF-8 string's bytes past 0x7f), none of them a keyword, nothing else.
    bool ok = !fn->empty() && utf8_length(*fn) <= 200 && fn->front() != '.' && fn->back() != '.';
    for (std::size_t i = 0; ok && i < fn->size(); ++i) {
      const unsigned char ch = static_cast<unsigned char>((*fn)[i]);
      ok = std::isalnum(ch) || ch == '_' || ch >= 0x80 || (ch == '.' && (*fn)[i - 1] != '.');
      if (ok && (i == 0 || (*fn)[i - 1] == '.') && std::isdigit(ch)) ok = false;
    }
    for (std::size_t start = 0; ok && start <= fn->size();) {
      const std::size_t dot = std::min(fn->find('.', start), fn->size());
      ok = !python_keyword(std::string_view(*fn).substr(start, dot - start));
      start = dot + 1;
    }
    if (!ok) {
      l.fail("collate_fn", "expected a Python name such as \"mymodule.pad_collate\" (a module's function, no keyword), "
                           "got \"" + excerpt(*fn) + "\"");
    }
    out.collate_fn = *fn;
  }
  for (const auto& k : kNoEffect) {
    if (l.has(k)) out.ignored_keys.push_back(k);
  }
  if (l.has("order_name") && !l.has("order")) {
    l.fail("order_name", "used only with \"order\": it names a recorded order (batchcheck.scan() writes both)");
  }
  if (auto order = l.string("order")) {
    // The recorded batches are the sampler, the batch size and drop_last at once.
    for (const char* k : {"sampler", "shuffle", "seed", "epoch", "world_size", "sampler_drop_last", "drop_last"}) {
      if (l.has(k)) {
        l.fail(k, std::string("not used with \"order\": the recorded batches already say which samples each batch "
                              "of each rank holds; remove \"") + k + "\"");
      }
    }
    if (order->empty()) l.fail("order", "expected a non-empty string");
    out.order_path = resolve_path(base, *order);
    // order_name: what the order is, where its file is not the user's (batchcheck.scan()'s).
    const std::optional<std::string> name = l.string("order_name");
    if (name && (name->empty() || utf8_length(*name) > 200)) l.fail("order_name", "expected a name of 1 to 200 characters");
    out.order = std::make_shared<const RecordedOrder>(load_order(name ? single_line(*name) : *order, out.order_path));
    out.world_size = std::max<uint64_t>(1, out.order->ranks.size());
    if (l.has("order_rank")) {
      const JsonObject share = l.object("order_rank");
      share.reject_unknown({"rank", "world_size", "samples"});
      LoaderConfig::RankShare r;
      r.world_size = share.required_uint("world_size", 1);
      if (r.world_size > kMaxWorldSize) share.fail("world_size", world_size_too_large(r.world_size));
      r.rank = share.required_uint("rank", 0);
      if (r.rank >= r.world_size) share.fail("rank", "expected a rank below world_size " + std::to_string(r.world_size));
      r.samples = share.uint("samples", 0).value_or(0);
      if (out.order->ranks.size() != 1) l.fail("order_rank", "names the one rank the order holds; this order holds " +
                                                                 std::to_string(out.order->ranks.size()) + " ranks");
      out.order_rank = r;
    }
    // The configured batch size is the nominal one (what tail findings compare with).
    out.batch_size = l.uint("batch_size", 1).value_or(std::max<uint64_t>(1, out.order->largest_batch));
    out.accumulation_steps = l.uint("accumulation_steps", 1).value_or(1);
    parse_collate(l, out.collate);
    return;
  }
  if (l.has("order_rank")) l.fail("order_rank", "describes a recorded order: use it with \"order\"");
  out.batch_size = l.required_uint("batch_size", 1);
  out.drop_last = l.boolean("drop_last").value_or(false);
  out.world_size = l.uint("world_size", 1).value_or(1);
  if (out.world_size > kMaxWorldSize) l.fail("world_size", world_size_too_large(out.world_size));
  // batch_size needs no bound: a batch never holds more than a rank's samples, which the
  // data's own size bounds (the .npy reader bounds the one kind of file that does not).
  const auto shuffle = l.boolean("shuffle");
  if (auto kind = l.choice("sampler", {"sequential", "random", "distributed"})) {
    out.sampler = *kind == "sequential" ? SamplerKind::Sequential
                  : *kind == "random"   ? SamplerKind::Random
                                        : SamplerKind::Distributed;
    if (out.world_size > 1 && out.sampler != SamplerKind::Distributed) {
      l.fail("sampler", "world_size " + std::to_string(out.world_size) +
                            " needs \"distributed\": with a " + *kind + " sampler every rank would see every sample");
    }
    if (out.sampler == SamplerKind::Sequential && shuffle.value_or(false)) {
      l.fail("shuffle", "true contradicts sampler \"sequential\" (DataLoader(shuffle=True) uses a RandomSampler)");
    }
    if (out.sampler == SamplerKind::Random && shuffle && !*shuffle) {
      l.fail("shuffle", "false contradicts sampler \"random\"");
    }
  } else if (out.world_size > 1) {
    out.sampler = SamplerKind::Distributed;
  } else {
    out.sampler = shuffle.value_or(false) ? SamplerKind::Random : SamplerKind::Sequential;
  }
  // DistributedSampler shuffles unless told not to; the DataLoader does not.
  out.shuffle = out.sampler == SamplerKind::Random ||
                (out.sampler == SamplerKind::Distributed && shuffle.value_or(true));
  out.seed_given = l.has("seed");
  if (const json* seed = l.find("seed")) {
    if (seed->is_number_unsigned()) {
      out.seed = seed->get<uint64_t>();
    } else if (seed->is_number_integer()) {
      out.seed = static_cast<uint64_t>(seed->get<int64_t>());  // two's complement, as manual_seed
      out.seed_negative = true;
    } else {
      l.fail("seed", "expected an integer in [-2^63, 2^64-1] (what torch.manual_seed accepts), got " + describe_json(*seed));
    }
  }
  out.epoch = l.uint("epoch").value_or(0);
  if (out.sampler == SamplerKind::Distributed && out.shuffle && !out.seed_negative && out.epoch > UINT64_MAX - out.seed) {
    l.fail("seed", "seed + epoch = " + std::to_string(out.seed) + " + " + std::to_string(out.epoch) +
                       " exceeds 2^64-1: DistributedSampler calls manual_seed(seed + epoch), which raises "
                       "\"Overflow when unpacking long long\" (torch 2.x; \"... long\" in 1.13), so this training "
                       "never starts");
  }
  out.sampler_drop_last = l.boolean("sampler_drop_last").value_or(false);
  out.accumulation_steps = l.uint("accumulation_steps", 1).value_or(1);
  parse_collate(l, out.collate);
}

void apply_loss_target(const JsonObject& top, Config& cfg) {
  if (!cfg.loss.target) return;
  const std::string& target = *cfg.loss.target;
  const JsonObject loss = top.object("loss");
  DataConfig& d = cfg.data;
  switch (d.format) {
    case DataFormat::ImageFolder:
      loss.fail("target", "an image folder's target is each image's class index; remove loss.target");
    case DataFormat::Pt:
    case DataFormat::Stream:
      if (d.targets_explicit && d.targets != target) {
        loss.fail("target", "names \"" + target + "\" but data.targets names \"" + d.targets + "\"; keep one");
      }
      d.targets = target;
      d.targets_explicit = true;
      d.has_targets = true;
      return;
    case DataFormat::Npy: {
      const auto it = std::find(d.field_names.begin(), d.field_names.end(), target);
      if (it == d.field_names.end()) {
        if (d.field_names.empty()) {
          loss.fail("target", "names a field, but data.inputs is one .npy file; give the targets' file in data.targets, or map "
                              "every field to its file: \"inputs\": {\"" + target + "\": \"" + target + ".npy\", ...}");
        }
        loss.fail("target", "no field \"" + target + "\" in data.inputs (fields: " + join(d.field_names) + ")" + did_you_mean(target, d.field_names));
      }
      if (d.has_targets) loss.fail("target", "names a field of data.inputs, but data.targets names the targets' file already; keep one");
      if (d.field_names.size() == 1) loss.fail("target", "is the only field of data.inputs: the model has no input left");
      // The field moves from the inputs to the targets.
      const auto k = static_cast<std::size_t>(it - d.field_names.begin());
      d.targets = d.field_files[k];
      d.targets_display = d.field_displays[k];
      d.targets_offsets = d.field_offsets[k];
      d.targets_offsets_display = d.field_offsets_displays[k];
      d.has_targets = true;
      for (auto* v : {&d.field_names, &d.field_files, &d.field_displays, &d.field_offsets, &d.field_offsets_displays}) {
        v->erase(v->begin() + static_cast<std::ptrdiff_t>(k));
      }
      d.inputs = d.field_files.front();
      d.inputs_display = d.field_displays.front();
      return;
    }
  }
}

void check_fields(const JsonObject& top, const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const DataConfig& d = cfg.data;
  // Before the checks below, which compare the lists with each other.
  const JsonObject data = top.object("data");
  if (const json* in = data.find("inputs"); in && in->is_object()) check_field_count(data, "inputs", in->size(), "fields");
  const JsonObject model = top.object("model");
  if (m.format == ModelFormat::Pt2 && (m.inputs_kind == InputsKind::Named || m.inputs_kind == InputsKind::Record)) {
    model.fail("inputs", "a .pt2 program takes its inputs positionally: list the fields in forward's order");
  }
  const CollateConfig& collate = cfg.loader.collate;
  if (cfg.loss.type == LossType::Model) {
    // forward(inputs..., targets): the targets are its last positional argument.
    if (m.inputs_kind == InputsKind::Named || m.inputs_kind == InputsKind::Record) {
      model.fail("inputs", "with loss type \"model\" the targets follow the inputs positionally (model(images, targets)): list the input fields");
    }
    if (!d.has_targets) {
      top.object("loss").fail("type", "\"model\" passes the targets to forward, which computes the loss: the data holds no targets");
    }
    if (m.format == ModelFormat::Pt2) top.object("loss").fail("type", "\"model\" needs a TorchScript model in train mode; a .pt2 program runs as exported");
  }
  // A step runs as TorchScript, or eagerly in batchcheck.scan()'s process where no capture of it
  // can be made (model.format "eager"); never as a compiled program.
  if (cfg.loss.type == LossType::Step && m.format == ModelFormat::Pt2) {
    top.object("loss").fail("type", "\"step\" runs the training step as TorchScript (batchcheck.scan(step=...) traces it with the "
                                    "model), or eagerly in batchcheck.scan(); model.format is \"pt2\"");
  }
  if (collate.list) {
    const JsonObject co = top.object("loader").object("collate");
    if (!returns_loss(cfg.loss.type) && cfg.loss.type != LossType::None) {
      co.fail("list", "batches stay lists of samples, which batchcheck's " + std::string(to_string(cfg.loss.type)) +
                          " cannot compare with a prediction: set loss.type to \"model\" (forward computes its loss from the "
                          "targets, as torchvision's detection models do) or \"none\"");
    }
    if (m.format == ModelFormat::Pt2) co.fail("list", "a .pt2 program takes tensors, not lists of samples");
    if (m.inputs_kind == InputsKind::Record) {
      co.fail("list", "model.inputs \"record\" passes one Dict[str, Tensor] of batched fields; with lists of samples, list the fields");
    }
  }
  if (!collate.masks.empty()) {
    const JsonObject masks = top.object("loader").object("collate").object("mask");
    for (const auto& [name, source] : collate.masks) {
      if (m.inputs_kind == InputsKind::Single) {
        masks.fail(name, "a generated mask reaches forward through model.inputs: list it there, e.g. [\"" + source + "\", \"" + name + "\"]");
      }
      const bool listed = m.inputs_kind == InputsKind::Record ||
                          std::find(m.input_fields.begin(), m.input_fields.end(), source) != m.input_fields.end();
      if (!listed) masks.fail(name, "marks \"" + source + "\", which model.inputs does not list");
      if (std::find(d.field_names.begin(), d.field_names.end(), name) != d.field_names.end()) {
        masks.fail(name, "is a field of data.inputs already; name the generated mask differently");
      }
    }
  }
  if (d.format != DataFormat::Npy) return;
  const bool mapped = !d.field_names.empty();
  if (m.inputs_kind == InputsKind::Single && d.field_names.size() > 1) {
    model.fail("inputs", "missing: data.inputs names " + std::to_string(d.field_names.size()) + " fields (" +
                             join(d.field_names) + "); list the ones forward takes, in order, or \"record\"");
  }
  if (m.inputs_kind == InputsKind::Positional || m.inputs_kind == InputsKind::Named) {
    for (std::size_t i = 0; i < m.input_fields.size(); ++i) {
      const std::string& f = m.input_fields[i];
      const std::string where = m.inputs_kind == InputsKind::Named ? "inputs." + m.input_args[i] : "inputs[" + std::to_string(i) + "]";
      if (collate.mask_source(f)) continue;  // generated by the collate
      if (!mapped) {
        model.fail(where, "names the field \"" + f + "\" but data.inputs is one .npy file; map each field to its file: "
                          "\"inputs\": {\"" + f + "\": \"" + f + ".npy\", ...}");
      }
      if (std::find(d.field_names.begin(), d.field_names.end(), f) == d.field_names.end()) {
        model.fail(where, "no field \"" + f + "\" in data.inputs (fields: " + join(d.field_names) + ")" + did_you_mean(f, d.field_names));
      }
    }
  }
  if (m.inputs_kind == InputsKind::Record && !mapped) {
    model.fail("inputs", "\"record\" passes named fields as one Dict[str, Tensor]: map each field to its .npy file in data.inputs");
  }
  const JsonObject loader = top.object("loader");
  for (const auto& [name, value] : cfg.loader.collate.pad) {
    (void)value;
    const bool known = name == "inputs" || name == "targets" ||
                       std::find(d.field_names.begin(), d.field_names.end(), name) != d.field_names.end();
    if (!known) {
      std::vector<std::string> names = d.field_names;
      names.insert(names.end(), {"inputs", "targets"});
      loader.object("collate").object("pad").fail(name, "no such field (fields: " + join(names) + ")" + did_you_mean(name, names));
    }
  }
}

}  // namespace batchcheck
