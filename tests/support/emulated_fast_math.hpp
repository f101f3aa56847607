// What both host emulations of the kernels (tests/support/emulation: fibers; tests/emulation:
// std::threads) put in place of kernels/tile/fast_math.h: exact functions for the SFU's
// approximations.
#pragma once

#include <cmath>

namespace tilefmha::tile {

inline float exp2_approx(float x) {
  return std::exp2(x);
}
inline float log2_approx(float x) {
  return std::log2(x);
}
inline float reciprocal_approx(float x) {
  return 1.0f / x;
}

}  // namespace tilefmha::tile
