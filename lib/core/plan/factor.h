#pragma once
// Integer factorization for every 64-bit N: trial division by small primes, then
// deterministic Miller-Rabin and Pollard's rho (Brent). Milliseconds even for
// 2^64-59 or a product of two 32-bit primes.
#include <cstdint>
#include <vector>

namespace batchcheck {

bool is_prime(uint64_t n);
// Prime factors in ascending order, with multiplicity. factorize(1) is empty.
std::vector<uint64_t> factorize(uint64_t n);
// All divisors of n in ascending order; divisors(0) is empty.
std::vector<uint64_t> divisors(uint64_t n);

}  // namespace batchcheck
