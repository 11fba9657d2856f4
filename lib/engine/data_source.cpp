#include "engine/data_source.h"

#include <torch/serialize.h>

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

class NpySource : public DataSource {
 public:
  explicit NpySource(const DataConfig& d) {
    inputs_ = std::make_unique<NpyFile>(d.inputs_display, d.inputs);
    if (d.has_targets) {
      targets_ = std::make_unique<NpyFile>(d.targets_display, d.targets);
      if (targets_->samples() != inputs_->samples()) {
        throw InputError(d.targets_display, "",
                         "holds " + std::to_string(targets_->samples()) + " samples but " + d.inputs_display + " holds " +
                             std::to_string(inputs_->samples()) + "; inputs and targets must have the same count");
      }
    }
  }
  uint64_t samples() const override { return inputs_->samples(); }
  bool has_targets() const override { return targets_ != nullptr; }
  TensorMeta sample_meta(bool target) const override {
    const NpyFile* f = target ? targets_.get() : inputs_.get();
    TensorMeta m;
    if (!f) return m;
    m.present = true;
    for (std::size_t i = 1; i < f->header().shape.size(); ++i) m.shape.push_back(static_cast<int64_t>(f->header().shape[i]));
    m.dtype = to_string(f->header().dtype);
    at::ScalarType t = torch_dtype(f->header().dtype);
    m.floating = at::isFloatingType(t);
    return m;
  }
  at::Tensor gather(bool target, const std::vector<int64_t>& indices) const override {
    const NpyFile* f = target ? targets_.get() : inputs_.get();
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
    return t;
  }

 private:
  std::unique_ptr<NpyFile> inputs_, targets_;
};

class PtSource : public DataSource {
 public:
  explicit PtSource(const DataConfig& d) : display_(d.path_display) {
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
    if (v.isGenericDict()) {
      auto dict = v.toGenericDict();
      auto lookup = [&](const std::string& key, bool required) -> at::Tensor {
        for (const auto& item : dict) {
          if (item.key().isString() && item.key().toStringRef() == key) {
            if (!item.value().isTensor()) {
              throw InputError(display_, "key \"" + key + "\"", "is not a tensor (got " + describe(item.value()) + ")");
            }
            return item.value().toTensor();
          }
        }
        if (!required) return {};
        std::vector<std::string> keys;
        for (const auto& item : dict) keys.push_back(item.key().isString() ? item.key().toStringRef() : "?");
        std::string hint = did_you_mean(key, keys);
        throw InputError(display_, "key \"" + key + "\"", "missing from the saved dict (keys: " + join(keys) + ")" + hint);
      };
      inputs_ = lookup(d.inputs, true);
      targets_ = lookup(d.targets, d.targets_explicit);
    } else if (v.isTuple() || v.isList()) {
      std::vector<c10::IValue> items;
      if (v.isTuple()) {
        for (const auto& e : v.toTupleRef().elements()) items.push_back(e);
      } else {
        for (const auto& e : v.toListRef()) items.push_back(e);
      }
      if (items.size() != 2 && items.size() != 1) {
        throw InputError(display_, "", "expected a tuple or list of (inputs, targets), got " + std::to_string(items.size()) + " elements");
      }
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!items[i].isTensor()) {
          throw InputError(display_, "element " + std::to_string(i), "is not a tensor (got " + describe(items[i]) + ")");
        }
      }
      inputs_ = items[0].toTensor();
      if (items.size() == 2) targets_ = items[1].toTensor();
    } else if (v.isTensor()) {
      inputs_ = v.toTensor();
    } else {
      throw InputError(display_, "", "expected a dict of tensors or a tuple (inputs, targets), got " + describe(v));
    }
    if (inputs_.dim() == 0) throw InputError(display_, "inputs", "a 0-d tensor has no sample dimension");
    if (targets_.defined()) {
      if (targets_.dim() == 0) throw InputError(display_, "targets", "a 0-d tensor has no sample dimension");
      if (targets_.size(0) != inputs_.size(0)) {
        throw InputError(display_, "", "inputs hold " + std::to_string(inputs_.size(0)) + " samples but targets hold " +
                                           std::to_string(targets_.size(0)) + "; they must have the same count");
      }
    }
    inputs_ = inputs_.contiguous();
    if (targets_.defined()) targets_ = targets_.contiguous();
  }
  uint64_t samples() const override { return static_cast<uint64_t>(inputs_.size(0)); }
  bool has_targets() const override { return targets_.defined(); }
  TensorMeta sample_meta(bool target) const override { return meta_of(target ? targets_ : inputs_, true); }
  at::Tensor gather(bool target, const std::vector<int64_t>& indices) const override {
    const at::Tensor& t = target ? targets_ : inputs_;
    if (!t.defined()) return {};
    bool consecutive = !indices.empty();
    for (std::size_t i = 1; i < indices.size() && consecutive; ++i) consecutive = indices[i] == indices[i - 1] + 1;
    if (consecutive) return t.narrow(0, indices.front(), static_cast<int64_t>(indices.size())).clone();
    return t.index_select(0, at::tensor(indices, at::kLong));
  }

 private:
  std::string display_;
  at::Tensor inputs_, targets_;
};

}  // namespace

std::unique_ptr<DataSource> open_data_source(const DataConfig& data) {
  if (data.format == DataFormat::Npy) return std::make_unique<NpySource>(data);
  return std::make_unique<PtSource>(data);
}

}  // namespace batchcheck
