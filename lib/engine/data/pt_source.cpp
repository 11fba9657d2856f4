// A torch.save file as a data source: a dict of fields, a tuple (inputs, targets), or a list
// of per-sample records; each field a stacked tensor or a list of per-sample tensors.
#include <torch/serialize.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "core/base/errors.h"
#include "core/base/files.h"
#include "core/base/text.h"
#include "core/findings/error_text.h"
#include "core/parse/file_kind.h"
#include "core/parse/pickle_check.h"
#include "engine/data/data_fields.h"
#include "engine/data/data_source.h"
#include "engine/data/pt_mapped.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

// One field of a torch.save file: a tensor whose first dimension is the sample, or a list
// of per-sample tensors (variable-length sequences), which the collate_fn puts together.
// A sample may also be a dict of tensors (a detection target: boxes, labels), which only a
// list collate keeps as it is.
struct Field {
  at::Tensor stacked;
  std::vector<at::Tensor> items;
  std::vector<c10::Dict<std::string, at::Tensor>> dicts;
  bool ragged = false, dicted = false;
  bool defined() const { return ragged || dicted || stacked.defined(); }
  int64_t count() const {
    return dicted ? static_cast<int64_t>(dicts.size()) : ragged ? static_cast<int64_t>(items.size()) : stacked.size(0);
  }
};

class PtSource : public DataSource {
 public:
  explicit PtSource(const Config& cfg) : display_(cfg.data.path_display), collate_(cfg.loader.collate) {
    const DataConfig& d = cfg.data;
    target_name_ = d.targets;
    require_regular_file(display_, d.path, "a file written by torch.save");
    map_ = std::make_shared<MappedFile>(d.path, display_);
    // LibTorch's unpickler trusts the file: a malformed pickle or a tensor reaching past its
    // storage crashes it or reads heap bytes. Checked here first, with bounds.
    const std::string_view view = map_->bytes();
    if (std::string problem = check_torch_save(view); !problem.empty()) {
      std::string hint = problem.rfind("it holds a Python object", 0) == 0 ? data_file_hint(classify_torch_file(view)) : "";
      throw InputError(display_, "", hint.empty() ? "not a usable torch.save file: " + problem : hint);
    }
    c10::IValue v;
    try {
      if (view.rfind("PK\x03\x04", 0) == 0) {
        v = unpickle_mapped(map_, display_);
      } else {
        // Not a zip (the format before torch 1.6): LibTorch reads it from memory, or says why not.
        v = torch::pickle_load(std::vector<char>(view.begin(), view.end()));
      }
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      std::string hint = data_file_hint(classify_torch_file(view));
      if (!hint.empty()) throw InputError(display_, "", hint);
      throw InputError(display_, "", "not a file written by torch.save (" + single_line(exception_message(e)).substr(0, 200) + ")");
    }
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
    for (std::size_t k = 0; k <= inputs_.size(); ++k) {
      const Field& f = k < inputs_.size() ? inputs_[k] : targets_;
      if (!f.dicted || collate_.list) continue;
      std::vector<std::string> keys;
      for (const auto& item : f.dicts.front()) keys.push_back(item.key());
      throw InputError(display_, k < inputs_.size() ? names_[k] : target_name_,
                       "is a dict per sample (" + join(keys) + "), which a detection DataLoader keeps as a list with "
                       "collate_fn=lambda b: tuple(zip(*b)): set loader.collate to {\"list\": true}");
    }
    map_->release();  // the checks and the unpickler touched every member's header
  }
  uint64_t samples() const override { return static_cast<uint64_t>(inputs_[0].count()); }
  const std::vector<std::string>& input_names() const override { return names_; }
  bool has_targets() const override { return targets_.defined(); }
  TensorMeta sample_meta(int field) const override {
    const Field& f = at_field(field);
    if (f.dicted) {
      TensorMeta m;
      m.present = true;
      m.dtype = "dict";
      return m;
    }
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
  std::vector<int64_t> lengths(int field, const std::vector<int64_t>& indices) const override {
    const Field& f = at_field(field);
    if (!f.ragged) return DataSource::lengths(field, indices);
    std::vector<int64_t> out;
    out.reserve(indices.size());
    for (int64_t i : indices) {
      const at::Tensor& t = f.items[static_cast<std::size_t>(i)];
      out.push_back(t.dim() ? t.size(0) : 1);
    }
    return out;
  }
  c10::IValue gather_list(int field, const std::vector<int64_t>& indices) const override {
    const Field& f = at_field(field);
    if (!f.defined()) return c10::IValue();
    if (f.dicted) {
      c10::List<c10::Dict<std::string, at::Tensor>> out;
      for (int64_t i : indices) {
        c10::Dict<std::string, at::Tensor> d;
        for (const auto& item : f.dicts[static_cast<std::size_t>(i)]) d.insert(item.key(), read_copy(item.value(), *map_));
        out.push_back(std::move(d));
      }
      return out;
    }
    if (!f.ragged) return DataSource::gather_list(field, indices);
    c10::List<at::Tensor> out;
    for (int64_t i : indices) out.push_back(read_copy(f.items[static_cast<std::size_t>(i)], *map_));
    return out;
  }

  at::Tensor gather(int field, const std::vector<int64_t>& indices) const override {
    const Field& f = at_field(field);
    if (!f.defined()) return {};
    if (f.dicted) throw InternalError("gather: a field of dicts needs loader.collate.list");
    const bool target = field == kTargetField;
    const std::string& name = target ? target_name_ : names_[static_cast<std::size_t>(field)];
    if (f.ragged) {
      std::vector<at::Tensor> batch;
      batch.reserve(indices.size());
      for (int64_t i : indices) batch.push_back(read_copy(f.items[static_cast<std::size_t>(i)], *map_));
      return collate_samples(batch, name, collate_.pad_for(name, target), collate_.pad_to_multiple_of);
    }
    // Row by row from the file: only the batch's rows are read.
    const at::Tensor& t = f.stacked;
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] = static_cast<int64_t>(indices.size());
    at::Tensor batch = at::empty(shape, t.options());
    const std::size_t row = t.size(0) ? static_cast<std::size_t>(t.nbytes()) / static_cast<std::size_t>(t.size(0)) : 0;
    const char* src = static_cast<const char*>(t.data_ptr());
    char* dst = static_cast<char*>(batch.data_ptr());
    // Consecutive rows are one read.
    for (std::size_t r = 0; r < indices.size();) {
      std::size_t n = 1;
      while (r + n < indices.size() && indices[r + n] == indices[r] + static_cast<int64_t>(n)) ++n;
      const char* from = src + static_cast<std::size_t>(indices[r]) * row;
      if (map_->contains(from, n * row)) {
        map_->read_at(from, n * row, dst + r * row);
      } else {
        std::memcpy(dst + r * row, from, n * row);  // made in memory (a non-contiguous tensor)
      }
      r += n;
    }
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
    std::vector<c10::IValue> items = elements(v);
    uint64_t bytes = 0;
    if (!items.empty() && items[0].isGenericDict()) {
      f.dicted = true;
      for (std::size_t i = 0; i < items.size(); ++i) {
        const std::string at = where + (where.empty() ? "" : ", ") + "sample " + std::to_string(i);
        if (!items[i].isGenericDict()) throw InputError(display_, at, "is not a dict like sample 0 (got " + describe(items[i]) + ")");
        c10::Dict<std::string, at::Tensor> d;
        for (const auto& item : items[i].toGenericDict()) {
          if (!item.key().isString() || !item.value().isTensor()) {
            throw InputError(display_, at, "a sample's dict must map names to tensors (got " + describe(item.key()) + " -> " +
                                               describe(item.value()) + ")");
          }
          d.insert(item.key().toStringRef(), item.value().toTensor());
          bytes += static_cast<uint64_t>(item.value().toTensor().nbytes());
        }
        f.dicts.push_back(std::move(d));
      }
      bytes_per_sample_ += bytes / items.size();
      return f;
    }
    f.ragged = true;
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
  std::shared_ptr<MappedFile> map_;
  CollateConfig collate_;
  std::vector<std::string> names_;
  std::vector<Field> inputs_;
  std::string target_name_;
  Field targets_;
  uint64_t bytes_per_sample_ = 0;
};


}  // namespace

std::unique_ptr<DataSource> open_pt_source(const Config& cfg) { return std::make_unique<PtSource>(cfg); }

}  // namespace batchcheck
