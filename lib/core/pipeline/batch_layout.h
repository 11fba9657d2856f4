#pragma once
// Where the samples of a batch lie in a tensor an op is given, so that an index fault inside a
// sequence model names its sample, as it does on images. A tensor whose first dimension is the
// batch's size is batch-first (default_collate's [B, ...]); any other (pad_sequence's [T, B],
// labels flattened to [B*T], a shifted target tgt[1:] flattened) is mapped through a field of
// the batch it is proven to be made of: the engine compares its values with each view of the
// fields listed here (field_views), and keeps the layout only where the matches agree.
#include <cstdint>
#include <optional>
#include <vector>

namespace batchcheck {

struct BatchLayout {
  std::vector<int64_t> shape;  // the shape a flat position is unravelled in
  std::size_t dim = 0;         // its dimension of the batch's samples
  // The sample (row of the batch) a flat position of the tensor belongs to.
  uint64_t row_of(uint64_t flat) const;
};

// The batch's dimension of a field of `shape` the loader delivered: its first where that is the
// batch's size, else its only dimension of that size; nullopt where none, or two.
std::optional<std::size_t> batch_dim(const std::vector<int64_t>& shape, uint64_t batch);

// A view of a field that a tensor of `numel` elements may be made of: the field (by index),
// transposed (2-D), narrowed along its dimension that is not the batch's to `length` from
// `offset` (2-D; the whole dimension where not narrowed), in `layout` (the view's shape).
struct FieldView {
  std::size_t field = 0;
  bool transposed = false;
  int64_t offset = 0, length = 0;
  BatchLayout layout;
};
std::vector<FieldView> field_views(uint64_t numel, uint64_t batch, const std::vector<std::vector<int64_t>>& fields);

// The rows holding the flat positions `flat`, ascending, each once.
std::vector<uint64_t> rows_of(const BatchLayout& layout, const std::vector<uint64_t>& flat);

}  // namespace batchcheck
