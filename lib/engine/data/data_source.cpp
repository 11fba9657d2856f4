// The data sources: .npy files read row by row (here), a torch.save file (pt_source.cpp),
// and the collate that builds a batch from samples.
#include "engine/data/data_source.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/base/errors.h"
#include "core/base/text.h"
#include "core/findings/error_text.h"
#include "core/parse/npy.h"
#include "core/pipeline/contract.h"
#include "engine/checks/tensor_checks.h"
#include "engine/data/data_fields.h"
#include "engine/torch_util.h"

namespace batchcheck {

c10::IValue DataSource::gather_list(int field, const std::vector<int64_t>& indices) const {
  if (field == kTargetField && !has_targets()) return c10::IValue();
  // Each sample alone, as the dataset's __getitem__ returns it.
  c10::List<at::Tensor> out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(gather(field, {i}).select(0, 0));
  return out;
}

namespace {

// One .npy field: a file of stacked samples, or values + offsets for variable-length samples
// (sample i is values[offsets[i]:offsets[i+1]]), both read with positioned reads only.
class NpyField {
 public:
  NpyField(const std::string& display, const std::string& path, const std::string& offsets_display, const std::string& offsets_path)
      : values_(std::make_unique<NpyFile>(display, path)) {
    if (offsets_path.empty()) return;
    offsets_ = std::make_unique<NpyFile>(offsets_display, offsets_path);
    const NpyHeader& h = offsets_->header();
    if (h.dtype != NpyDtype::Int64 || h.shape.size() != 1 || h.shape[0] == 0) {
      throw InputError(offsets_display, "", std::string("offsets must be a 1-D int64 array of samples + 1 entries (got ") + to_string(h.dtype) + " " +
                                                shape_text(std::vector<int64_t>(h.shape.begin(), h.shape.end())) + ")");
    }
    if (values_->header().shape.empty()) throw InputError(display, "", "values of a variable-length field need a first dimension");
    // Every offset, once, in chunks: they must start at 0, never decrease, and end at the
    // values' length, so that no batch can read outside the file.
    constexpr uint64_t kChunk = 1 << 16;
    std::vector<int64_t> chunk(kChunk);
    int64_t previous = 0;
    for (uint64_t first = 0; first < h.shape[0]; first += kChunk) {
      const uint64_t n = std::min(kChunk, h.shape[0] - first);
      offsets_->read_span(first, n, chunk.data());
      for (uint64_t i = 0; i < n; ++i) {
        const int64_t o = chunk[i];
        if ((first + i == 0 && o != 0) || o < previous) {
          throw InputError(offsets_display, "[" + std::to_string(first + i) + "]",
                           first + i == 0 ? "offsets must start at 0, got " + std::to_string(o)
                                          : "offsets must not decrease: " + std::to_string(o) + " after " + std::to_string(previous));
        }
        previous = o;
      }
    }
    if (static_cast<uint64_t>(previous) != values_->samples()) {
      throw InputError(offsets_display, "[" + std::to_string(h.shape[0] - 1) + "]",
                       "the last offset must be the values' length, " + std::to_string(values_->samples()) + ", got " + std::to_string(previous));
    }
  }
  bool ragged() const { return offsets_ != nullptr; }
  const std::string& display() const { return values_->display(); }
  uint64_t samples() const { return ragged() ? offsets_->samples() - 1 : values_->samples(); }
  TensorMeta sample_meta() const {
    TensorMeta m;
    m.present = true;
    const auto& shape = values_->header().shape;
    // A stacked field's sample drops the first dimension; a ragged one's keeps it, varying.
    if (ragged()) m.shape.push_back(-1);
    for (std::size_t i = 1; i < shape.size(); ++i) m.shape.push_back(static_cast<int64_t>(shape[i]));
    m.dtype = to_string(values_->header().dtype);
    m.floating = at::isFloatingType(torch_dtype(values_->header().dtype));
    return m;
  }
  uint64_t sample_bytes() const {
    const uint64_t n = samples();
    return ragged() ? (n ? values_->header().row_bytes * values_->samples() / n : 0) : values_->header().row_bytes;
  }
  // The batch's rows (stacked), or its samples one by one (ragged) for the collate.
  at::Tensor read_stacked(const std::vector<int64_t>& indices) const {
    const NpyHeader& h = values_->header();
    std::vector<int64_t> shape{static_cast<int64_t>(indices.size())};
    for (std::size_t i = 1; i < h.shape.size(); ++i) shape.push_back(static_cast<int64_t>(h.shape[i]));
    at::Tensor t = allocate(shape, indices.size());
    values_->read_rows(indices, t.data_ptr());
    return t;
  }
  std::vector<int64_t> lengths(const std::vector<int64_t>& indices) const {
    std::vector<int64_t> out;
    out.reserve(indices.size());
    for (int64_t i : indices) {
      int64_t span[2];
      offsets_->read_span(static_cast<uint64_t>(i), 2, span);
      out.push_back(span[1] - span[0]);
    }
    return out;
  }
  std::vector<at::Tensor> read_samples(const std::vector<int64_t>& indices) const {
    const NpyHeader& h = values_->header();
    std::vector<at::Tensor> out;
    out.reserve(indices.size());
    for (int64_t i : indices) {
      int64_t span[2];
      offsets_->read_span(static_cast<uint64_t>(i), 2, span);
      std::vector<int64_t> shape{span[1] - span[0]};
      for (std::size_t k = 1; k < h.shape.size(); ++k) shape.push_back(static_cast<int64_t>(h.shape[k]));
      at::Tensor t = allocate(shape, 1);
      values_->read_span(static_cast<uint64_t>(span[0]), static_cast<uint64_t>(span[1] - span[0]), t.data_ptr());
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  at::Tensor allocate(const std::vector<int64_t>& shape, std::size_t samples) const {
    const at::ScalarType dtype = torch_dtype(values_->header().dtype);
    try {
      return at::empty(shape, at::TensorOptions().dtype(dtype));
    } catch (const c10::Error& e) {
      // The machine's limit, not a bug: say how much one batch needs.
      long double bytes = static_cast<long double>(c10::elementSize(dtype));
      for (int64_t d : shape) bytes *= static_cast<long double>(d);
      throw InputError(display(), "",
                       "a batch of " + plural(samples, "sample") + " needs " +
                           format_number(static_cast<double>(bytes / (1024.0L * 1024.0L))) +
                           " MiB and allocating it failed (" + parse_error_text(e.what()).message +
                           "): not enough memory (RAM, or the limit of ulimit -v) for this batch size");
    }
  }
  std::unique_ptr<NpyFile> values_, offsets_;
};

class NpySource : public DataSource {
 public:
  NpySource(const Config& cfg) : collate_(cfg.loader.collate) {
    const DataConfig& d = cfg.data;
    if (d.field_names.empty()) {
      names_ = {"inputs"};
      inputs_.push_back(std::make_unique<NpyField>(d.inputs_display, d.inputs, d.inputs_offsets_display, d.inputs_offsets));
    } else {
      names_ = cfg.model.inputs_kind == InputsKind::Single ? d.field_names : wanted_fields(cfg, d.field_names, "", cfg.file);
      for (const auto& name : names_) {
        const std::size_t k = static_cast<std::size_t>(std::find(d.field_names.begin(), d.field_names.end(), name) - d.field_names.begin());
        inputs_.push_back(std::make_unique<NpyField>(d.field_displays[k], d.field_files[k], d.field_offsets_displays[k], d.field_offsets[k]));
        if (inputs_.back()->samples() != inputs_.front()->samples()) {
          throw InputError(d.field_displays[k], "", "holds " + std::to_string(inputs_.back()->samples()) + " samples but " +
                                                        inputs_.front()->display() + " holds " +
                                                        std::to_string(inputs_.front()->samples()) + "; every field must have the same count");
        }
      }
    }
    if (d.has_targets) {
      targets_ = std::make_unique<NpyField>(d.targets_display, d.targets, d.targets_offsets_display, d.targets_offsets);
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
    const NpyField* f = file(field);
    return f ? f->sample_meta() : TensorMeta{};
  }
  uint64_t sample_bytes() const override {
    uint64_t total = targets_ ? targets_->sample_bytes() : 0;
    for (const auto& f : inputs_) total += f->sample_bytes();
    return total;
  }
  at::Tensor gather(int field, const std::vector<int64_t>& indices) const override {
    const NpyField* f = file(field);
    if (!f) return {};
    const bool target = field == kTargetField;
    const std::string& name = target ? std::string("targets") : names_[static_cast<std::size_t>(field)];
    if (f->ragged()) return collate_samples(f->read_samples(indices), name, collate_.pad_for(name, target), collate_.pad_to_multiple_of);
    return collate_stacked(f->read_stacked(indices), name, target, collate_);
  }
  std::vector<int64_t> lengths(int field, const std::vector<int64_t>& indices) const override {
    const NpyField* f = file(field);
    return f && f->ragged() ? f->lengths(indices) : DataSource::lengths(field, indices);
  }

 private:
  const NpyField* file(int field) const {
    return field == kTargetField ? targets_.get() : inputs_.at(static_cast<std::size_t>(field)).get();
  }
  CollateConfig collate_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<NpyField>> inputs_;
  std::unique_ptr<NpyField> targets_;
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

namespace {

std::unique_ptr<DataSource> open_file_source(const Config& cfg) {
  switch (cfg.data.format) {
    case DataFormat::Npy: return std::make_unique<NpySource>(cfg);
    case DataFormat::Pt: return open_pt_source(cfg);
    case DataFormat::ImageFolder: return open_image_source(cfg);
    case DataFormat::Stream: return open_stream_source(cfg);
  }
  return nullptr;
}

// The fields a collate_fn generates (loader.collate.mask) around the source that holds the
// rest: forward's inputs in model.inputs' order, a mask computed from its padded field's
// sample lengths, the length rounded up as the padding is.
class MaskedSource : public DataSource {
 public:
  MaskedSource(const Config& cfg, std::unique_ptr<DataSource> inner) : inner_(std::move(inner)), collate_(cfg.loader.collate) {
    const std::vector<std::string>& have = inner_->input_names();
    auto index_of = [&](const std::string& field) {
      const auto it = std::find(have.begin(), have.end(), field);
      if (it == have.end()) {
        throw InputError(cfg.file, "loader.collate.mask", "marks \"" + field + "\", which is not a field of the data (fields: " +
                                                              join(have) + ")" + did_you_mean(field, have));
      }
      return static_cast<int>(it - have.begin());
    };
    std::vector<std::string> order = cfg.model.input_fields;
    if (cfg.model.inputs_kind == InputsKind::Record) {
      order = have;
      for (const auto& [name, source] : collate_.masks) order.push_back(name);
    }
    for (const auto& name : order) {
      const std::string* source = collate_.mask_source(name);
      names_.push_back(name);
      fields_.push_back({source ? -1 : index_of(name), source ? index_of(*source) : -1});
    }
  }
  uint64_t samples() const override { return inner_->samples(); }
  const std::vector<std::string>& input_names() const override { return names_; }
  bool has_targets() const override { return inner_->has_targets(); }
  TensorMeta sample_meta(int field) const override {
    if (field == kTargetField) return inner_->sample_meta(field);
    const Field& f = fields_.at(static_cast<std::size_t>(field));
    if (f.inner >= 0) return inner_->sample_meta(f.inner);
    TensorMeta m = inner_->sample_meta(f.marks);
    m.shape = {m.shape.empty() ? 1 : m.shape[0]};
    m.dtype = "int64";
    m.floating = false;
    return m;
  }
  uint64_t sample_bytes() const override { return inner_->sample_bytes(); }
  at::Tensor gather(int field, const std::vector<int64_t>& indices) const override {
    if (field == kTargetField) return inner_->gather(field, indices);
    const Field& f = fields_.at(static_cast<std::size_t>(field));
    if (f.inner >= 0) return inner_->gather(f.inner, indices);
    const std::vector<int64_t> lengths = inner_->lengths(f.marks, indices);
    int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
    const auto m = static_cast<int64_t>(collate_.pad_to_multiple_of);
    if (m > 1 && longest % m != 0) longest += m - longest % m;
    at::Tensor positions = at::arange(longest, at::kLong).unsqueeze(0);
    return positions.lt(at::tensor(lengths, at::kLong).unsqueeze(1)).to(at::kLong);
  }
  std::vector<int64_t> lengths(int field, const std::vector<int64_t>& indices) const override {
    const Field& f = fields_.at(static_cast<std::size_t>(field));
    return f.inner >= 0 ? inner_->lengths(f.inner, indices) : DataSource::lengths(field, indices);
  }

 private:
  struct Field {
    int inner;  // the inner source's field, or -1 for a generated mask
    int marks;  // a mask: the inner field whose lengths it marks
  };
  std::unique_ptr<DataSource> inner_;
  CollateConfig collate_;
  std::vector<std::string> names_;
  std::vector<Field> fields_;
};

}  // namespace

std::unique_ptr<DataSource> open_data_source(const Config& cfg) {
  if (cfg.loader.collate.masks.empty()) return open_file_source(cfg);
  // The file holds every field but the generated ones.
  Config files = cfg;
  ModelConfig& m = files.model;
  for (std::size_t i = m.input_fields.size(); i-- > 0;) {
    if (!cfg.loader.collate.mask_source(m.input_fields[i])) continue;
    m.input_fields.erase(m.input_fields.begin() + static_cast<std::ptrdiff_t>(i));
    if (!m.input_args.empty()) m.input_args.erase(m.input_args.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return std::make_unique<MaskedSource>(cfg, open_file_source(files));
}

namespace {

c10::IValue to_device(const c10::IValue& v, const c10::Device& device) {
  if (v.isTensor()) return v.toTensor().to(device);
  if (v.isTensorList()) {
    const c10::List<at::Tensor> in = v.toTensorList();
    c10::List<at::Tensor> out;
    for (std::size_t i = 0; i < in.size(); ++i) out.push_back(in.get(i).to(device));
    return out;
  }
  if (v.isList()) {  // dicts of tensors
    const c10::List<c10::IValue> in = v.toList();
    c10::List<c10::Dict<std::string, at::Tensor>> out;
    for (std::size_t i = 0; i < in.size(); ++i) {
      c10::Dict<std::string, at::Tensor> moved;
      for (const auto& item : in.get(i).toGenericDict()) moved.insert(item.key().toStringRef(), item.value().toTensor().to(device));
      out.push_back(std::move(moved));
    }
    return out;
  }
  return v;
}

}  // namespace

StagedBatch stage_batch(const DataSource& data, bool lists, const c10::Device& device, const std::vector<int64_t>& indices) {
  StagedBatch s;
  s.indices = indices;
  try {
    for (std::size_t k = 0; k < data.input_names().size(); ++k) {
      const int field = static_cast<int>(k);
      s.inputs.push_back(lists ? data.gather_list(field, indices) : c10::IValue(data.gather(field, indices)));
    }
    if (lists) {
      s.target_list = data.gather_list(kTargetField, indices);
    } else {
      s.target = data.gather(kTargetField, indices);
    }
  } catch (CollateError& e) {
    s.inputs.clear();
    s.target = at::Tensor();
    s.failure = LoadFailure{{}, std::move(e.failure)};
    return s;
  } catch (UnreadableError& e) {
    s.inputs.clear();
    s.target = at::Tensor();
    s.failure = LoadFailure{std::move(e.samples), {}};
    return s;
  }
  s.given = data.given_forward(indices);
  for (const auto& in : s.inputs) {
    s.input_stats.push_back(floating_value(in) ? std::optional<ValueStats>(check_value(in, ValueRule{})) : std::nullopt);
  }
  if (device.is_cuda()) {
    s.host_inputs = s.inputs;
    s.host_target = s.target;
    s.host_target_list = s.target_list;
    for (auto& in : s.inputs) in = to_device(in, device);
    if (s.target.defined()) s.target = s.target.to(device);
    s.target_list = to_device(s.target_list, device);
  }
  return s;
}

}  // namespace batchcheck
