#include "engine/data_source.h"

#include <torch/serialize.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error_text.h"
#include "core/errors.h"
#include "core/file_kind.h"
#include "core/files.h"
#include "core/npy.h"
#include "core/pickle_check.h"
#include "core/text.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

// A stacked batch (every sample the same shape) through a padding collate: pad_sequence of
// equal lengths changes nothing but the rounding to a multiple, and its own checks.
at::Tensor collate_stacked(at::Tensor batch, const std::string& name, bool target, const CollateConfig& c) {
  std::optional<double> pad = c.pad_for(name, target);
  if (!pad || !batch.defined()) return batch;
  return collate_samples(batch.unbind(0), name, pad, c.pad_to_multiple_of);
}

// The input fields model.inputs asks for, among `available` (a .pt file's keys, or the .npy
// map's), in forward's order. Throws InputError naming the missing one.
std::vector<std::string> wanted_fields(const Config& cfg, const std::vector<std::string>& available, const std::string& target,
                                       const std::string& display, const std::string& where = "") {
  const ModelConfig& m = cfg.model;
  std::vector<std::string> out;
  if (m.inputs_kind == InputsKind::Record) {
    for (const auto& k : available) {
      if (k != target) out.push_back(k);
    }
    return out;
  }
  for (const auto& f : m.input_fields) {
    if (std::find(available.begin(), available.end(), f) == available.end()) {
      throw InputError(display, where + "key \"" + f + "\"", "missing, but model.inputs names it (keys: " + join(available) + ")" +
                                                      did_you_mean(f, available));
    }
    out.push_back(f);
  }
  return out;
}

uint64_t meta_bytes(const TensorMeta& m) {
  if (!m.present) return 0;
  const uint64_t size = m.dtype == "float64" || m.dtype == "int64"   ? 8
                        : m.dtype == "float32" || m.dtype == "int32" ? 4
                        : m.dtype == "float16" || m.dtype == "int16" ? 2
                                                                     : 1;
  uint64_t n = size;
  for (int64_t d : m.shape) n *= d < 0 ? 1 : static_cast<uint64_t>(d);
  return n;
}

// Every pad key must name a field or a role ("inputs", "targets").
void check_pad_keys(const Config& cfg, const std::vector<std::string>& inputs, const std::string& target) {
  for (const auto& [name, value] : cfg.loader.collate.pad) {
    (void)value;
    std::vector<std::string> names = inputs;
    names.push_back(target);
    if (name == "inputs" || name == "targets" || std::find(names.begin(), names.end(), name) != names.end()) continue;
    throw InputError(cfg.file, "loader.collate.pad." + name, "no such field (fields: " + join(names) + ")" + did_you_mean(name, names));
  }
}

class NpySource : public DataSource {
 public:
  NpySource(const Config& cfg) : collate_(cfg.loader.collate) {
    const DataConfig& d = cfg.data;
    if (d.field_names.empty()) {
      names_ = {"inputs"};
      inputs_.push_back(std::make_unique<NpyFile>(d.inputs_display, d.inputs));
    } else {
      names_ = cfg.model.inputs_kind == InputsKind::Single ? d.field_names : wanted_fields(cfg, d.field_names, "", cfg.file);
      for (const auto& name : names_) {
        const std::size_t k = static_cast<std::size_t>(std::find(d.field_names.begin(), d.field_names.end(), name) - d.field_names.begin());
        inputs_.push_back(std::make_unique<NpyFile>(d.field_displays[k], d.field_files[k]));
        if (inputs_.back()->samples() != inputs_.front()->samples()) {
          throw InputError(d.field_displays[k], "", "holds " + std::to_string(inputs_.back()->samples()) + " samples but " +
                                                        inputs_.front()->display() + " holds " +
                                                        std::to_string(inputs_.front()->samples()) + "; every field must have the same count");
        }
      }
    }
    if (d.has_targets) {
      targets_ = std::make_unique<NpyFile>(d.targets_display, d.targets);
      if (targets_->samples() != inputs_.front()->samples()) {
        throw InputError(d.targets_display, "",
                         "holds " + std::to_string(targets_->samples()) + " samples but " + inputs_.front()->display() + " holds " +
                             std::to_string(inputs_.front()->samples()) + "; inputs and targets must have the same count");
      }
    }
    check_pad_keys(cfg, names_, "targets");
  }
  uint64_t samples() const override { return inputs_.front()->samples(); }
  const std::vector<std::string>& input_names() const override { return names_; }
  bool has_targets() const override { return targets_ != nullptr; }
  TensorMeta sample_meta(int field) const override {
    const NpyFile* f = file(field);
    TensorMeta m;
    if (!f) return m;
    m.present = true;
    for (std::size_t i = 1; i < f->header().shape.size(); ++i) m.shape.push_back(static_cast<int64_t>(f->header().shape[i]));
    m.dtype = to_string(f->header().dtype);
    at::ScalarType t = torch_dtype(f->header().dtype);
    m.floating = at::isFloatingType(t);
    return m;
  }
  uint64_t sample_bytes() const override {
    uint64_t total = meta_bytes(sample_meta(kTargetField));
    for (std::size_t k = 0; k < inputs_.size(); ++k) total += meta_bytes(sample_meta(static_cast<int>(k)));
    return total;
  }
  at::Tensor gather(int field, const std::vector<int64_t>& indices) const override {
    const NpyFile* f = file(field);
    if (!f) return {};
    std::vector<int64_t> shape{static_cast<int64_t>(indices.size())};
    for (std::size_t i = 1; i < f->header().shape.size(); ++i) shape.push_back(static_cast<int64_t>(f->header().shape[i]));
    // Read straight into the tensor's storage: no intermediate copy.
    const at::ScalarType dtype = torch_dtype(f->header().dtype);
    at::Tensor t;
    try {
      t = at::empty(shape, at::TensorOptions().dtype(dtype));
    } catch (const c10::Error& e) {
      // The machine's limit, not a bug: say how much one batch needs.
      long double bytes = static_cast<long double>(c10::elementSize(dtype));
      for (int64_t d : shape) bytes *= static_cast<long double>(d);
      throw InputError(f->display(), "",
                       "a batch of " + plural(indices.size(), "sample") + " needs " +
                           format_number(static_cast<double>(bytes / (1024.0L * 1024.0L))) +
                           " MiB and allocating it failed (" + parse_error_text(e.what()).message +
                           "): not enough memory (RAM, or the limit of ulimit -v) for this batch size");
    }
    f->read_rows(indices, t.data_ptr());
    const bool target = field == kTargetField;
    return collate_stacked(t, target ? "targets" : names_[static_cast<std::size_t>(field)], target, collate_);
  }

 private:
  const NpyFile* file(int field) const {
    return field == kTargetField ? targets_.get() : inputs_.at(static_cast<std::size_t>(field)).get();
  }
  CollateConfig collate_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<NpyFile>> inputs_;
  std::unique_ptr<NpyFile> targets_;
};

// One field of a torch.save file: a tensor whose first dimension is the sample, or a list
// of per-sample tensors (variable-length sequences), which the collate_fn puts together.
struct Field {
  at::Tensor stacked;
  std::vector<at::Tensor> items;
  bool ragged = false;
  bool defined() const { return ragged || stacked.defined(); }
  int64_t count() const { return ragged ? static_cast<int64_t>(items.size()) : stacked.size(0); }
};

class PtSource : public DataSource {
 public:
  explicit PtSource(const Config& cfg) : display_(cfg.data.path_display), collate_(cfg.loader.collate) {
    const DataConfig& d = cfg.data;
    target_name_ = d.targets;
    require_regular_file(display_, d.path, "a file written by torch.save");
    std::ifstream in(d.path, std::ios::binary);
    if (!in) throw InputError(display_, "", "cannot read: " + std::string(std::strerror(errno)));
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // LibTorch's unpickler trusts the file: a malformed pickle or a tensor reaching past its
    // storage crashes it or reads heap bytes. Checked here first, with bounds.
    const std::string_view view(bytes.data(), bytes.size());
    if (std::string problem = check_torch_save(view); !problem.empty()) {
      std::string hint = problem.rfind("it holds a Python object", 0) == 0 ? data_file_hint(classify_torch_file(view)) : "";
      throw InputError(display_, "", hint.empty() ? "not a usable torch.save file: " + problem : hint);
    }
    c10::IValue v;
    try {
      v = torch::pickle_load(bytes);
    } catch (const std::exception& e) {
      std::string hint = data_file_hint(classify_torch_file(view));
      if (!hint.empty()) throw InputError(display_, "", hint);
      throw InputError(display_, "", "not a file written by torch.save (" + single_line(exception_message(e)).substr(0, 200) + ")");
    }
    bytes = {};
    const bool named = cfg.model.inputs_kind != InputsKind::Single;
    if (v.isGenericDict()) {
      auto dict = v.toGenericDict();
      std::vector<std::string> keys;
      for (const auto& item : dict) keys.push_back(item.key().isString() ? item.key().toStringRef() : "?");
      auto lookup = [&](const std::string& key, bool required) -> Field {
        for (const auto& item : dict) {
          if (item.key().isString() && item.key().toStringRef() == key) return field_of(item.value(), "key \"" + key + "\"");
        }
        if (!required) return {};
        throw InputError(display_, "key \"" + key + "\"", "missing from the saved dict (keys: " + join(keys) + ")" + did_you_mean(key, keys));
      };
      names_ = named ? wanted_fields(cfg, keys, d.targets, display_) : std::vector<std::string>{d.inputs};
      for (const auto& name : names_) inputs_.push_back(lookup(name, true));
      targets_ = lookup(d.targets, d.targets_explicit);
    } else if (v.isTuple() || v.isList()) {
      std::vector<c10::IValue> items = elements(v);
      if (!items.empty() && (items[0].isTuple() || items[0].isList() || items[0].isGenericDict())) {
        records(items, cfg);
      } else {
        if (named) unnamed(cfg);
        if (items.size() != 2 && items.size() != 1) {
          throw InputError(display_, "", "expected a tuple or list of (inputs, targets), or a list of per-sample (input, target) records, got " +
                                             std::to_string(items.size()) + " elements");
        }
        names_ = {"inputs"};
        inputs_.push_back(field_of(items[0], "element 0"));
        if (items.size() == 2) targets_ = field_of(items[1], "element 1");
      }
    } else if (v.isTensor()) {
      if (named) unnamed(cfg);
      names_ = {"inputs"};
      inputs_.push_back(field_of(v, ""));
    } else {
      throw InputError(display_, "", "expected a dict of tensors or a tuple (inputs, targets), got " + describe(v));
    }
    if (inputs_.empty()) throw InputError(display_, "", "holds no input field: every key is the target \"" + d.targets + "\"");
    for (std::size_t k = 0; k < inputs_.size(); ++k) {
      if (inputs_[k].count() != inputs_[0].count()) {
        throw InputError(display_, "", names_[k] + " holds " + std::to_string(inputs_[k].count()) + " samples but " + names_[0] +
                                           " holds " + std::to_string(inputs_[0].count()) + "; every field must have the same count");
      }
    }
    if (targets_.defined() && targets_.count() != inputs_[0].count()) {
      throw InputError(display_, "", "inputs hold " + std::to_string(inputs_[0].count()) + " samples but targets hold " +
                                         std::to_string(targets_.count()) + "; they must have the same count");
    }
    check_pad_keys(cfg, names_, target_name_);
  }
  uint64_t samples() const override { return static_cast<uint64_t>(inputs_[0].count()); }
  const std::vector<std::string>& input_names() const override { return names_; }
  bool has_targets() const override { return targets_.defined(); }
  TensorMeta sample_meta(int field) const override {
    const Field& f = at_field(field);
    if (!f.ragged) return meta_of(f.stacked, true);
    // Per-sample shapes: a dimension that varies between samples is -1.
    TensorMeta m;
    if (f.items.empty()) return m;
    m = meta_of(f.items[0]);
    for (const auto& t : f.items) {
      if (static_cast<std::size_t>(t.dim()) != m.shape.size()) {
        m.shape.clear();
        break;
      }
      for (std::size_t k = 0; k < m.shape.size(); ++k) {
        if (m.shape[k] != t.size(static_cast<int64_t>(k))) m.shape[k] = -1;
      }
    }
    return m;
  }
  uint64_t sample_bytes() const override { return bytes_per_sample_; }
  at::Tensor gather(int field, const std::vector<int64_t>& indices) const override {
    const Field& f = at_field(field);
    if (!f.defined()) return {};
    const bool target = field == kTargetField;
    const std::string& name = target ? target_name_ : names_[static_cast<std::size_t>(field)];
    if (f.ragged) {
      std::vector<at::Tensor> batch;
      batch.reserve(indices.size());
      for (int64_t i : indices) batch.push_back(f.items[static_cast<std::size_t>(i)]);
      return collate_samples(batch, name, collate_.pad_for(name, target), collate_.pad_to_multiple_of);
    }
    const at::Tensor& t = f.stacked;
    bool consecutive = !indices.empty();
    for (std::size_t i = 1; i < indices.size() && consecutive; ++i) consecutive = indices[i] == indices[i - 1] + 1;
    at::Tensor batch = consecutive ? t.narrow(0, indices.front(), static_cast<int64_t>(indices.size())).clone()
                                   : t.index_select(0, at::tensor(indices, at::kLong));
    return collate_stacked(batch, name, target, collate_);
  }

 private:
  const Field& at_field(int field) const {
    return field == kTargetField ? targets_ : inputs_.at(static_cast<std::size_t>(field));
  }

  [[noreturn]] void unnamed(const Config& cfg) const {
    throw InputError(display_, "", "model.inputs names fields, but this file has no field names; save a dict of them, e.g. "
                                   "torch.save({\"" + join(cfg.model.input_fields.empty() ? std::vector<std::string>{"input_ids", "attention_mask"}
                                                                                          : cfg.model.input_fields,
                                                          "\": ..., \"") +
                                       "\": ..., \"targets\": y}, path)");
  }

  static std::vector<c10::IValue> elements(const c10::IValue& v) {
    std::vector<c10::IValue> items;
    if (v.isTuple()) {
      for (const auto& e : v.toTupleRef().elements()) items.push_back(e);
    } else {
      for (const auto& e : v.toListRef()) items.push_back(e);
    }
    return items;
  }

  // A tensor (N, ...) or a list of per-sample tensors.
  Field field_of(const c10::IValue& v, const std::string& where) {
    Field f;
    if (v.isTensor()) {
      f.stacked = v.toTensor();
      if (f.stacked.dim() == 0) throw InputError(display_, where, "a 0-d tensor has no sample dimension");
      f.stacked = f.stacked.contiguous();
      bytes_per_sample_ += f.stacked.size(0) ? static_cast<uint64_t>(f.stacked.nbytes()) / static_cast<uint64_t>(f.stacked.size(0)) : 0;
      return f;
    }
    if (!v.isList() && !v.isTuple()) throw InputError(display_, where, "is not a tensor or a list of per-sample tensors (got " + describe(v) + ")");
    f.ragged = true;
    std::vector<c10::IValue> items = elements(v);
    uint64_t bytes = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].isTensor()) {
        throw InputError(display_, where + (where.empty() ? "" : ", ") + "sample " + std::to_string(i),
                         "is not a tensor (got " + describe(items[i]) + ")");
      }
      f.items.push_back(items[i].toTensor());
      bytes += static_cast<uint64_t>(f.items.back().nbytes());
    }
    bytes_per_sample_ += items.empty() ? 0 : bytes / items.size();
    return f;
  }

  // [(x0, y0), (x1, y1), ...] or [{"input_ids": x0, ..., "targets": y0}, ...]: what
  // torch.save([dataset[i] for i in range(len(dataset))]) writes.
  void records(const std::vector<c10::IValue>& items, const Config& cfg) {
    const DataConfig& d = cfg.data;
    const bool dicts = items[0].isGenericDict();
    std::vector<std::string> keys;
    if (dicts) {
      for (const auto& item : items[0].toGenericDict()) keys.push_back(item.key().isString() ? item.key().toStringRef() : "?");
      names_ = cfg.model.inputs_kind != InputsKind::Single ? wanted_fields(cfg, keys, d.targets, display_, "sample 0, ")
                                                           : std::vector<std::string>{d.inputs};
    } else {
      if (cfg.model.inputs_kind != InputsKind::Single) unnamed(cfg);
      names_ = {"inputs"};
    }
    // One list per field: a GenericList copy shares its elements, so each is made on its own.
    std::vector<c10::impl::GenericList> xs;
    for (std::size_t k = 0; k < names_.size(); ++k) xs.emplace_back(c10::AnyType::get());
    c10::impl::GenericList ys(c10::AnyType::get());
    bool with_targets = true;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string where = "sample " + std::to_string(i);
      if (dicts && items[i].isGenericDict()) {
        auto dict = items[i].toGenericDict();
        auto get = [&](const std::string& key, bool required) -> std::optional<c10::IValue> {
          for (const auto& item : dict) {
            if (item.key().isString() && item.key().toStringRef() == key) return item.value();
          }
          if (!required) return std::nullopt;
          std::vector<std::string> have;
          for (const auto& item : dict) have.push_back(item.key().isString() ? item.key().toStringRef() : "?");
          throw InputError(display_, where + ", key \"" + key + "\"", "missing from the record (keys: " + join(have) + ")" + did_you_mean(key, have));
        };
        for (std::size_t k = 0; k < names_.size(); ++k) xs[k].push_back(*get(names_[k], true));
        auto y = get(d.targets, d.targets_explicit || (i > 0 && with_targets));
        if (y) ys.push_back(*y);
        if (i == 0) with_targets = y.has_value();
      } else if (!dicts && (items[i].isTuple() || items[i].isList())) {
        std::vector<c10::IValue> rec = elements(items[i]);
        if (rec.empty() || rec.size() > 2 || (i > 0 && rec.size() != (with_targets ? 2u : 1u))) {
          throw InputError(display_, where, "expected an (input, target) record like the samples before it, got " +
                                                std::to_string(rec.size()) + " elements");
        }
        xs[0].push_back(rec[0]);
        if (i == 0) with_targets = rec.size() == 2;
        if (rec.size() == 2) ys.push_back(rec[1]);
      } else {
        throw InputError(display_, where, "expected a record like sample 0, got " + describe(items[i]));
      }
    }
    for (std::size_t k = 0; k < names_.size(); ++k) inputs_.push_back(field_of(c10::IValue(xs[k]), names_[k]));
    if (with_targets) targets_ = field_of(c10::IValue(ys), "targets");
  }

  std::string display_;
  CollateConfig collate_;
  std::vector<std::string> names_;
  std::vector<Field> inputs_;
  std::string target_name_;
  Field targets_;
  uint64_t bytes_per_sample_ = 0;
};

}  // namespace

at::Tensor collate_samples(const std::vector<at::Tensor>& samples, const std::string& field, std::optional<double> pad,
                           uint64_t multiple) {
  try {
    if (!pad) return at::stack(samples, 0);
    at::Tensor batch = at::pad_sequence(samples, /*batch_first=*/true, *pad);
    const int64_t length = batch.dim() > 1 ? batch.size(1) : 0;
    const int64_t m = static_cast<int64_t>(multiple);
    if (m > 1 && length % m != 0) {
      // constant_pad_nd pads from the last dimension backwards: zeros up to dimension 1.
      std::vector<int64_t> widths(static_cast<std::size_t>(2 * (batch.dim() - 1)), 0);
      widths.back() = m - length % m;
      batch = at::constant_pad_nd(batch, widths, *pad);
    }
    return batch;
  } catch (const c10::Error& e) {
    CollateFailure f;
    f.padded = pad.has_value();
    f.field = field;
    f.error = parse_error_text(e.what_without_backtrace()).message;
    for (std::size_t r = 0; r < samples.size(); ++r) {
      const std::vector<int64_t> shape(samples[r].sizes().begin(), samples[r].sizes().end());
      bool seen = false;
      for (auto& [s, count] : f.shapes) {
        if (s == shape) {
          ++count;
          seen = true;
        }
      }
      if (!seen) f.shapes.push_back({shape, 1});
      if (r == 0 || !samples[r].sizes().equals(samples[0].sizes())) f.rows.push_back(r);
    }
    if (f.rows.size() == 1) {
      // The shapes agree (e.g. pad_sequence of 0-d samples): the whole batch.
      for (std::size_t r = 1; r < samples.size(); ++r) f.rows.push_back(r);
    }
    throw CollateError{std::move(f)};
  }
}

std::unique_ptr<DataSource> open_data_source(const Config& cfg) {
  if (cfg.data.format == DataFormat::Npy) return std::make_unique<NpySource>(cfg);
  return std::make_unique<PtSource>(cfg);
}

}  // namespace batchcheck
