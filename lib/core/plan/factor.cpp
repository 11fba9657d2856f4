#include "core/plan/factor.h"

#include "core/base/int128.h"

#include <algorithm>
#include <numeric>

namespace batchcheck {

namespace {
using u128 = uint128;

uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) { return static_cast<uint64_t>(static_cast<u128>(a) * b % m); }

uint64_t pow_mod(uint64_t base, uint64_t exp, uint64_t m) {
  uint64_t result = 1 % m;
  base %= m;
  while (exp) {
    if (exp & 1) result = mul_mod(result, base, m);
    base = mul_mod(base, base, m);
    exp >>= 1;
  }
  return result;
}

constexpr uint64_t kSmallPrimes[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};

// Brent's variant of Pollard's rho; returns a non-trivial factor of composite n.
uint64_t rho(uint64_t n) {
  if (n % 2 == 0) return 2;
  for (uint64_t c = 1;; ++c) {
    auto f = [&](uint64_t x) { return (mul_mod(x, x, n) + c) % n; };
    uint64_t y = 2, x = 2, g = 1, q = 1, ys = 2;
    const uint64_t m = 128;
    uint64_t r = 1;
    do {
      x = y;
      for (uint64_t i = 0; i < r; ++i) y = f(y);
      uint64_t k = 0;
      do {
        ys = y;
        for (uint64_t i = 0; i < std::min(m, r - k); ++i) {
          y = f(y);
          q = mul_mod(q, x > y ? x - y : y - x, n);
        }
        g = std::gcd(q, n);
        k += m;
      } while (k < r && g == 1);
      r *= 2;
    } while (g == 1);
    if (g == n) {
      // The batched gcd overshot: step back one at a time.
      do {
        ys = f(ys);
        g = std::gcd(x > ys ? x - ys : ys - x, n);
      } while (g == 1);
    }
    if (g != n) return g;
  }
}

void factor_into(uint64_t n, std::vector<uint64_t>& out) {
  if (n == 1) return;
  if (is_prime(n)) {
    out.push_back(n);
    return;
  }
  uint64_t d = rho(n);
  factor_into(d, out);
  factor_into(n / d, out);
}
}  // namespace

bool is_prime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : kSmallPrimes) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while (d % 2 == 0) {
    d /= 2;
    ++s;
  }
  // These 12 bases make Miller-Rabin deterministic for all n < 3.3e24.
  for (uint64_t a : kSmallPrimes) {
    uint64_t x = pow_mod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = mul_mod(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

std::vector<uint64_t> factorize(uint64_t n) {
  std::vector<uint64_t> out;
  if (n == 0) return out;
  for (uint64_t p = 2; p < 1000 && p * p <= n; ++p) {
    while (n % p == 0) {
      out.push_back(p);
      n /= p;
    }
  }
  factor_into(n, out);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> divisors(uint64_t n) {
  std::vector<uint64_t> out;
  if (n == 0) return out;
  out.push_back(1);
  auto primes = factorize(n);
  for (std::size_t i = 0; i < primes.size();) {
    const uint64_t p = primes[i];
    std::size_t mult = 0;
    while (i < primes.size() && primes[i] == p) {
      ++i;
      ++mult;
    }
    const std::size_t base = out.size();
    uint64_t power = 1;
    for (std::size_t e = 0; e < mult; ++e) {
      power *= p;
      for (std::size_t j = 0; j < base; ++j) out.push_back(out[j] * power);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace batchcheck
