// The data sources: .npy files read row by row (here), a torch.save file (pt_source.cpp),
// and the collate that builds a batch from samples.
#include "engine/data_source.h"

#include <algorithm>
#include <string>

#include "core/error_text.h"
#include "core/errors.h"
#include "core/npy.h"
#include "core/text.h"
#include "engine/data_fields.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

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
  switch (cfg.data.format) {
    case DataFormat::Npy: return std::make_unique<NpySource>(cfg);
    case DataFormat::Pt: return open_pt_source(cfg);
    case DataFormat::ImageFolder: return open_image_source(cfg);
  }
  return nullptr;
}

}  // namespace batchcheck
