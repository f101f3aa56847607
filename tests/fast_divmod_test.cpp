// The multiply-shift division the sm90 tile scheduler uses (kernels/tile/fast_divmod.h) against
// the compiler's division, over every divisor up to 4096, random and edge dividends below 2^31,
// and the largest divisors.
#include "tile/fast_divmod.h"

#include <gtest/gtest.h>

#include <random>

namespace {

using tilefmha::tile::fast_divide;
using tilefmha::tile::make_fast_divisor;

TEST(FastDivmod, MatchesIntegerDivisionBelowTwoToThe31) {
  std::mt19937 rng(std::random_device{}());
  for (unsigned d = 1; d <= 4096; ++d) {
    const auto divisor = make_fast_divisor(d);
    for (unsigned n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 0x7fffffffu}) {
      ASSERT_EQ(fast_divide(n, divisor), n / d) << n << " / " << d;
    }
    for (int k = 0; k < 200; ++k) {
      const unsigned n = rng() & 0x7fffffffu;
      ASSERT_EQ(fast_divide(n, divisor), n / d) << n << " / " << d;
    }
  }
}

TEST(FastDivmod, LargeDivisors) {
  for (unsigned d : {65535u, 65536u, 1u << 20, 0x7fffffffu, 0x80000000u}) {
    const auto divisor = make_fast_divisor(d);
    for (unsigned n : {0u, 1u, d - 1, 0x7ffffffeu, 0x7fffffffu}) {
      if (n >= 0x80000000u) continue;
      ASSERT_EQ(fast_divide(n, divisor), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
