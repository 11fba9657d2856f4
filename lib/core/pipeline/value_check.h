#pragma once
// The value checks of the loss contract as one fused pass over a tensor's memory:
// NaN/Inf, range and class-index counts, min and max, without LibTorch. Rows (samples)
// that violate are collected only when something is wrong, so a clean batch costs one
// read of its data.
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace batchcheck {

struct ValueRule {
  bool finite = true;              // NaN/Inf are violations
  std::optional<double> lo, hi;    // inclusive bounds
  // Class indices: every value must lie in [0, classes). A value equal to ignore_index never
  // violates (a class index, or a mask value a region loss ignores).
  bool class_index = false;
  int64_t classes = 0;
  std::optional<int64_t> ignore_index;
};

struct ValueStats {
  uint64_t elements = 0;
  uint64_t nan = 0, inf = 0;      // non-finite elements
  uint64_t below = 0, above = 0;  // finite elements outside [lo, hi] (or the class range)
  uint64_t ignored = 0;           // elements equal to ignore_index
  double min = std::numeric_limits<double>::quiet_NaN();  // over finite elements
  double max = std::numeric_limits<double>::quiet_NaN();
  std::vector<uint64_t> bad_rows;     // rows holding a violation, ascending (capped)
  uint64_t bad_rows_total = 0;
  std::vector<double> bad_values;     // a few distinct offending finite values

  uint64_t violations() const { return nan + inf + below + above; }
  bool ok() const { return violations() == 0; }
};

constexpr std::size_t kMaxBadRows = 1 << 16;
constexpr std::size_t kMaxBadValues = 8;

// `rows` rows of `row_elements` values each, contiguous.
ValueStats check_values(const float* data, uint64_t rows, uint64_t row_elements, const ValueRule& rule);
ValueStats check_values(const double* data, uint64_t rows, uint64_t row_elements, const ValueRule& rule);
ValueStats check_values(const int64_t* data, uint64_t rows, uint64_t row_elements, const ValueRule& rule);

// A batch kept as a list of samples (loader.collate.list): sample `row`'s stats joined to the
// batch's, as if they had been one row of a stacked tensor.
void add_sample(ValueStats& batch, const ValueStats& sample, uint64_t row);

}  // namespace batchcheck
