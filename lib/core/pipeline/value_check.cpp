#include "core/pipeline/value_check.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace batchcheck {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BATCHCHECK_HAVE_AVX2_KERNEL 1

struct FloatPass1 {
  float mn, mx;
  uint64_t bad;
};

// Pass 1 for float32 with AVX2, 8 lanes at a time. MINPS/MAXPS return their second
// operand when the first is NaN, so NaN never moves the extremes; ordered comparisons
// are false for NaN, so NaN counts as out of range, as in the scalar loop.
__attribute__((target("avx2,popcnt"))) FloatPass1 float_pass1_avx2(const float* data, uint64_t n, float lo, float hi) {
  __m256 vmn = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 vmx = _mm256_set1_ps(std::numeric_limits<float>::lowest());
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  uint64_t bad = 0;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(data + i);
    vmn = _mm256_min_ps(v, vmn);
    vmx = _mm256_max_ps(v, vmx);
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(v, vlo, _CMP_GE_OQ), _mm256_cmp_ps(v, vhi, _CMP_LE_OQ));
    bad += static_cast<uint64_t>(__builtin_popcount(~static_cast<unsigned>(_mm256_movemask_ps(in)) & 0xffu));
  }
  alignas(32) float lmn[8], lmx[8];
  _mm256_store_ps(lmn, vmn);
  _mm256_store_ps(lmx, vmx);
  FloatPass1 r{lmn[0], lmx[0], bad};
  for (int k = 1; k < 8; ++k) {
    r.mn = lmn[k] < r.mn ? lmn[k] : r.mn;
    r.mx = lmx[k] > r.mx ? lmx[k] : r.mx;
  }
  for (; i < n; ++i) {
    const float v = data[i];
    r.mn = v < r.mn ? v : r.mn;
    r.mx = v > r.mx ? v : r.mx;
    r.bad += (v >= lo && v <= hi) ? 0 : 1;
  }
  return r;
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
  return yes;
}
#endif

template <typename T>
bool violates(T v, const ValueRule& rule, double lo, double hi) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) return rule.finite;
  }
  if (rule.ignore_index && static_cast<double>(v) == static_cast<double>(*rule.ignore_index)) return false;
  if (rule.class_index) {
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

  // Pass 1: a branch-free reduction the compiler vectorizes (min/max in the MINPS/MAXPS
  // form, NaN failing both comparisons), in blocks so the count fits a lane-sized integer.
  using Count = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  T mn = std::numeric_limits<T>::max(), mx = std::numeric_limits<T>::lowest();
  uint64_t bad = 0;
  constexpr uint64_t kBlock = 1 << 16;
  uint64_t first = 0;
#ifdef BATCHCHECK_HAVE_AVX2_KERNEL
  if constexpr (std::is_same_v<T, float>) {
    if (have_avx2()) {
      FloatPass1 p = float_pass1_avx2(data, n, static_cast<float>(lo), static_cast<float>(hi));
      mn = p.mn;
      mx = p.mx;
      bad = p.bad;
      first = n;  // done
    }
  }
#endif
  for (uint64_t start = first; start < n; start += kBlock) {
    const uint64_t end = std::min(n, start + kBlock);
    Count block_bad = 0;
    T bmn = mn, bmx = mx;
    if constexpr (std::is_floating_point_v<T>) {
      const T flo = static_cast<T>(lo), fhi = static_cast<T>(hi);
      for (uint64_t i = start; i < end; ++i) {
        const T v = data[i];
        bmn = v < bmn ? v : bmn;
        bmx = v > bmx ? v : bmx;
        block_bad += (v >= flo && v <= fhi) ? Count{0} : Count{1};
      }
    } else {
      for (uint64_t i = start; i < end; ++i) {
        const T v = data[i];
        bmn = v < bmn ? v : bmn;
        bmx = v > bmx ? v : bmx;
      }
      // Integer bounds are checked from the extremes: a violation exists iff one lies outside.
      const double dlo = rule.class_index ? 0.0 : lo;
      const double dhi = rule.class_index ? static_cast<double>(rule.classes) - 1 : hi;
      block_bad = (end > start && (static_cast<double>(bmn) < dlo || static_cast<double>(bmx) > dhi)) ? 1 : 0;
    }
    mn = bmn;
    mx = bmx;
    bad += block_bad;
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
      if (rule.ignore_index && d == static_cast<double>(*rule.ignore_index)) {
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

void add_sample(ValueStats& batch, const ValueStats& sample, uint64_t row) {
  batch.elements += sample.elements;
  batch.nan += sample.nan;
  batch.inf += sample.inf;
  batch.below += sample.below;
  batch.above += sample.above;
  batch.ignored += sample.ignored;
  // min/max are over finite elements: NaN means none yet.
  if (!std::isnan(sample.min)) batch.min = std::isnan(batch.min) ? sample.min : std::min(batch.min, sample.min);
  if (!std::isnan(sample.max)) batch.max = std::isnan(batch.max) ? sample.max : std::max(batch.max, sample.max);
  if (sample.ok()) return;
  if (batch.bad_rows.size() < kMaxBadRows) batch.bad_rows.push_back(row);
  ++batch.bad_rows_total;
  for (double v : sample.bad_values) {
    if (batch.bad_values.size() >= kMaxBadValues) break;
    if (std::find(batch.bad_values.begin(), batch.bad_values.end(), v) == batch.bad_values.end()) batch.bad_values.push_back(v);
  }
}

}  // namespace batchcheck
