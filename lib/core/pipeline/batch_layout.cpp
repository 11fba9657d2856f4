#include "core/pipeline/batch_layout.h"

#include <algorithm>
#include <set>

namespace batchcheck {

namespace {

uint64_t elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  return n;
}

// A field shifted by more than this many steps (tgt[1:], tgt[:-1], x[2:]) is not looked for.
constexpr int64_t kMaxShift = 4;

}  // namespace

std::optional<std::size_t> batch_dim(const std::vector<int64_t>& shape, uint64_t batch) {
  if (shape.empty() || batch == 0) return std::nullopt;
  if (static_cast<uint64_t>(shape[0]) == batch) return 0;
  std::optional<std::size_t> found;
  for (std::size_t d = 1; d < shape.size(); ++d) {
    if (static_cast<uint64_t>(shape[d]) != batch) continue;
    if (found) return std::nullopt;  // two dimensions of the batch's size: which is not known
    found = d;
  }
  return found;
}

uint64_t BatchLayout::row_of(uint64_t flat) const {
  uint64_t inner = 1;
  for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= static_cast<uint64_t>(std::max<int64_t>(shape[d], 1));
  const uint64_t size = static_cast<uint64_t>(std::max<int64_t>(shape[dim], 1));
  return (flat / inner) % size;
}

std::vector<FieldView> field_views(uint64_t numel, uint64_t batch, const std::vector<std::vector<int64_t>>& fields) {
  std::vector<FieldView> views;
  if (batch == 0 || numel == 0) return views;
  for (std::size_t k = 0; k < fields.size(); ++k) {
    const std::vector<int64_t>& f = fields[k];
    const auto d = batch_dim(f, batch);
    if (!d) continue;
    if (f.size() != 2) {
      if (elements(f) == numel) views.push_back({k, false, 0, 0, {f, *d}});
      continue;
    }
    // 2-D ([B, T] or [T, B]): as it is or transposed, whole or shifted along its steps.
    if (numel % batch != 0) continue;
    const std::size_t steps_dim = 1 - *d;
    const int64_t steps = f[steps_dim], length = static_cast<int64_t>(numel / batch);
    if (length > steps || steps - length > kMaxShift) continue;
    for (int64_t offset = 0; offset + length <= steps; ++offset) {
      for (bool transposed : {false, true}) {
        std::vector<int64_t> shape = f;
        shape[steps_dim] = length;
        std::size_t dim = *d;
        if (transposed) {
          std::swap(shape[0], shape[1]);
          dim = 1 - dim;
        }
        views.push_back({k, transposed, offset, length, {shape, dim}});
      }
    }
  }
  return views;
}

std::vector<uint64_t> rows_of(const BatchLayout& layout, const std::vector<uint64_t>& flat) {
  std::set<uint64_t> rows;
  for (uint64_t i : flat) rows.insert(layout.row_of(i));
  return {rows.begin(), rows.end()};
}

}  // namespace batchcheck
