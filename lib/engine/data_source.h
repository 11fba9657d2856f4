#pragma once
// Where the samples come from: .npy files (read row by row) or one torch.save file.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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
  // The collated batch of these samples (CollateConfig), or undefined without targets.
  // Throws CollateError where the DataLoader's collate_fn raises.
  virtual at::Tensor gather(bool target, const std::vector<int64_t>& indices) const = 0;
  // Bytes read per sample (inputs and targets), to decide whether prefetching pays.
  virtual uint64_t sample_bytes() const {
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

struct CollateError {
  CollateFailure failure;
};

// The batch of `samples` (one tensor per sample) as the collate_fn builds it: torch.stack
// (default_collate), or pad_sequence(batch_first=True, padding_value=*pad) with the length
// rounded up to a multiple of `multiple`. Throws CollateError with LibTorch's own message.
at::Tensor collate_samples(const std::vector<at::Tensor>& samples, const std::string& field, std::optional<double> pad,
                           uint64_t multiple);

// Opens the data the config names. Throws InputError for unusable files.
std::unique_ptr<DataSource> open_data_source(const DataConfig& data, const CollateConfig& collate);

}  // namespace batchcheck
