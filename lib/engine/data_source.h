#pragma once
// Where the samples come from: .npy files (read row by row) or one torch.save file.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/config.h"

namespace batchcheck {

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual uint64_t samples() const = 0;
  virtual bool has_targets() const = 0;
  virtual TensorMeta sample_meta(bool target) const = 0;
  virtual at::Tensor gather(bool target, const std::vector<int64_t>& indices) const = 0;
  // Bytes read per sample (inputs and targets), to decide whether prefetching pays.
  uint64_t sample_bytes() const {
    uint64_t total = 0;
    for (bool target : {false, true}) {
      TensorMeta m = sample_meta(target);
      if (!m.present) continue;
      const uint64_t size = m.dtype == "float64" || m.dtype == "int64"   ? 8
                            : m.dtype == "float32" || m.dtype == "int32" ? 4
                            : m.dtype == "float16" || m.dtype == "int16" ? 2
                                                                         : 1;
      total += size * m.numel();
    }
    return total;
  }
};

// Opens the data the config names. Throws InputError for unusable files.
std::unique_ptr<DataSource> open_data_source(const DataConfig& data);

}  // namespace batchcheck
