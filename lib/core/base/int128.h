#pragma once
// 128-bit intermediates for exact 64-bit arithmetic (products of sample counts,
// modular multiplication). __extension__ keeps -Wpedantic quiet about the GCC type.
#include <cstdint>

namespace batchcheck {
__extension__ typedef unsigned __int128 uint128;

// a * b, or UINT64_MAX if the product does not fit.
inline uint64_t saturating_mul(uint64_t a, uint64_t b) {
  uint128 p = static_cast<uint128>(a) * b;
  return p > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(p);
}
}  // namespace batchcheck
