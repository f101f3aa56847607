// Division by a divisor fixed at launch (a count of heads, of query blocks) as one multiply-high,
// an add and a shift, where the compiler's 32-bit division by a runtime value costs ~25
// instructions. The multiplier and shift are computed on the host once per launch
// (Granlund-Montgomery round-up method): for d >= 1, s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1; then n / d = (mulhi(n, m) + n) >> s for every n < 2^31.
// Plain constexpr functions: host code builds and tests them, NVRTC compiles them as device code.
#pragma once

namespace tilefmha::tile {

struct FastDivisor {
  unsigned divisor;
  unsigned multiplier;
  unsigned shift;
};

constexpr FastDivisor make_fast_divisor(unsigned divisor) {
  unsigned shift = 0;
  while ((1ull << shift) < divisor) ++shift;
  const unsigned long long span = (1ull << shift) - divisor;
  const unsigned multiplier = static_cast<unsigned>((span << 32) / divisor + 1);
  return {divisor, multiplier, shift};
}

// n / d for 0 <= n < 2^31.
constexpr unsigned fast_divide(unsigned n, const FastDivisor& d) {
  const unsigned high =
      static_cast<unsigned>((static_cast<unsigned long long>(n) * d.multiplier) >> 32);
  return (high + n) >> d.shift;
}

}  // namespace tilefmha::tile
