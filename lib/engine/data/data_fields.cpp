#include "engine/data/data_fields.h"

#include <algorithm>

#include "core/base/errors.h"
#include "core/base/text.h"
#include "engine/data/data_source.h"

namespace batchcheck {

std::vector<std::string> wanted_fields(const Config& cfg, const std::vector<std::string>& available, const std::string& target,
                                       const std::string& display, const std::string& where) {
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

void check_pad_keys(const Config& cfg, const std::vector<std::string>& inputs, const std::string& target) {
  for (const auto& [name, value] : cfg.loader.collate.pad) {
    (void)value;
    std::vector<std::string> names = inputs;
    names.push_back(target);
    if (name == "inputs" || name == "targets" || std::find(names.begin(), names.end(), name) != names.end()) continue;
    throw InputError(cfg.file, "loader.collate.pad." + name, "no such field (fields: " + join(names) + ")" + did_you_mean(name, names));
  }
}

at::Tensor collate_stacked(at::Tensor batch, const std::string& name, bool target, const CollateConfig& c) {
  std::optional<double> pad = c.pad_for(name, target);
  if (!pad || !batch.defined()) return batch;
  return collate_samples(batch.unbind(0), name, pad, c.pad_to_multiple_of);
}

}  // namespace batchcheck
