#include <gtest/gtest.h>

#include "core/plan/factor.h"

using namespace batchcheck;

TEST(Factor, SmallNumbers) {
  EXPECT_TRUE(factorize(1).empty());
  EXPECT_TRUE(factorize(0).empty());
  EXPECT_EQ(factorize(1041), (std::vector<uint64_t>{3, 347}));
  EXPECT_EQ(factorize(1024), std::vector<uint64_t>(10, 2));
  EXPECT_EQ(divisors(1041), (std::vector<uint64_t>{1, 3, 347, 1041}));
  EXPECT_EQ(divisors(1), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(divisors(0).empty());
  EXPECT_EQ(divisors(12), (std::vector<uint64_t>{1, 2, 3, 4, 6, 12}));
}

TEST(Factor, LargePrimes) {
  const uint64_t m61 = (uint64_t{1} << 61) - 1;
  const uint64_t p64 = UINT64_MAX - 58;  // 2^64 - 59, the largest 64-bit prime
  EXPECT_TRUE(is_prime(m61));
  EXPECT_TRUE(is_prime(p64));
  EXPECT_EQ(factorize(m61), std::vector<uint64_t>{m61});
  EXPECT_EQ(divisors(p64), (std::vector<uint64_t>{1, p64}));
}

TEST(Factor, SemiprimeOfTwo32BitPrimes) {
  const uint64_t p = 4294967291ull, q = 4294967279ull;  // the two largest 32-bit primes
  EXPECT_TRUE(is_prime(p));
  EXPECT_TRUE(is_prime(q));
  EXPECT_EQ(factorize(p * q), (std::vector<uint64_t>{q, p}));
  EXPECT_EQ(divisors(p * q), (std::vector<uint64_t>{1, q, p, p * q}));
}

TEST(Factor, PowersAndMaximum) {
  EXPECT_EQ(factorize(uint64_t{1} << 63), std::vector<uint64_t>(63, 2));
  // 2^64 - 1 = 3 * 5 * 17 * 257 * 641 * 65537 * 6700417
  EXPECT_EQ(factorize(UINT64_MAX), (std::vector<uint64_t>{3, 5, 17, 257, 641, 65537, 6700417}));
  EXPECT_EQ(divisors(UINT64_MAX).size(), 128u);
}

TEST(Factor, CarmichaelAndStrongPseudoprimesAreComposite) {
  EXPECT_FALSE(is_prime(561));
  EXPECT_FALSE(is_prime(3215031751ull));  // strong pseudoprime to bases 2, 3, 5, 7
  EXPECT_FALSE(is_prime(3825123056546413051ull));  // strong pseudoprime to bases up to 23
  EXPECT_EQ(factorize(3825123056546413051ull), (std::vector<uint64_t>{149491, 747451, 34233211}));
}

TEST(Factor, AgreesWithTrialDivision) {
  for (uint64_t n = 1; n < 3000; ++n) {
    std::vector<uint64_t> expected;
    for (uint64_t d = 1; d <= n; ++d) {
      if (n % d == 0) expected.push_back(d);
    }
    ASSERT_EQ(divisors(n), expected) << n;
  }
}
