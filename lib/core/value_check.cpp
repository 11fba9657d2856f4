#include "core/value_check.h"

#include <algorithm>
#include <cmath>

namespace batchcheck {

namespace {

template <typename T>
bool violates(T v, const ValueRule& rule, double lo, double hi) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) return rule.finite;
  }
  if (rule.class_index) {
    if (rule.ignore_index && static_cast<int64_t>(v) == *rule.ignore_index) return false;
    return v < 0 || static_cast<int64_t>(v) >= rule.classes;
  }
  const double d = static_cast<double>(v);
  return d < lo || d > hi;
}

template <typename T>
ValueStats run(const T* data, uint64_t rows, uint64_t row_elements, const ValueRule& rule) {
  ValueStats s;
  const uint64_t n = rows * row_elements;
  s.elements = n;
  const double lo = rule.lo.value_or(-std::numeric_limits<double>::infinity());
  const double hi = rule.hi.value_or(std::numeric_limits<double>::infinity());

  // Pass 1: branch-light reduction the compiler can vectorize.
  T mn = std::numeric_limits<T>::max(), mx = std::numeric_limits<T>::lowest();
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const T v = data[i];
    if constexpr (std::is_floating_point_v<T>) {
      // NaN compares false both ways: it neither moves min/max nor passes the range.
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
      bad += !(v >= static_cast<T>(lo) && v <= static_cast<T>(hi));
    } else {
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      bad += rule.class_index ? (v < 0 || v >= rule.classes) : (static_cast<double>(v) < lo || static_cast<double>(v) > hi);
    }
  }
  if (n > 0) {
    s.min = static_cast<double>(mn);
    s.max = static_cast<double>(mx);
  }
  if constexpr (std::is_floating_point_v<T>) {
    // Infinities count as non-finite, not as extremes.
    if (std::isinf(s.min) || std::isinf(s.max) || bad) {
      // Rare path: recompute exactly.
    } else {
      return s;
    }
  } else {
    if (bad == 0) return s;
  }

  // Pass 2, only when something is off: exact counts, finite extremes, offending rows.
  s.min = std::numeric_limits<double>::quiet_NaN();
  s.max = std::numeric_limits<double>::quiet_NaN();
  for (uint64_t r = 0; r < rows; ++r) {
    bool row_bad = false;
    const T* p = data + r * row_elements;
    for (uint64_t i = 0; i < row_elements; ++i) {
      const T v = p[i];
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(v)) {
          ++s.nan;
          row_bad = row_bad || rule.finite;
          continue;
        }
        if (std::isinf(v)) {
          ++s.inf;
          row_bad = row_bad || rule.finite;
          continue;
        }
      }
      const double d = static_cast<double>(v);
      if (!(d >= s.min)) s.min = std::isnan(s.min) ? d : std::min(s.min, d);
      if (!(d <= s.max)) s.max = std::isnan(s.max) ? d : std::max(s.max, d);
      if (rule.class_index && rule.ignore_index && static_cast<int64_t>(v) == *rule.ignore_index) {
        ++s.ignored;
        continue;
      }
      if (violates(v, rule, lo, hi)) {
        const bool low = rule.class_index ? v < 0 : d < lo;
        ++(low ? s.below : s.above);
        row_bad = true;
        if (s.bad_values.size() < kMaxBadValues &&
            std::find(s.bad_values.begin(), s.bad_values.end(), d) == s.bad_values.end()) {
          s.bad_values.push_back(d);
        }
      }
    }
    if (row_bad) {
      ++s.bad_rows_total;
      if (s.bad_rows.size() < kMaxBadRows) s.bad_rows.push_back(r);
    }
  }
  if (!rule.finite) {
    // Non-finite values were asked not to count (e.g. targets of a loss that allows them).
    s.nan = s.inf = 0;
  }
  return s;
}

}  // namespace

ValueStats check_values(const float* data, uint64_t rows, uint64_t row_elements, const ValueRule& rule) {
  return run(data, rows, row_elements, rule);
}
ValueStats check_values(const double* data, uint64_t rows, uint64_t row_elements, const ValueRule& rule) {
  return run(data, rows, row_elements, rule);
}
ValueStats check_values(const int64_t* data, uint64_t rows, uint64_t row_elements, const ValueRule& rule) {
  return run(data, rows, row_elements, rule);
}

}  // namespace batchcheck
