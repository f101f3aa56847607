// Host stand-in for kernels/tile/fast_math.h (see tests/emulation/README.md): the SFU's
// approximations, exact on the host.
#pragma once

#include <cmath>

#include "tile/device.h"

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
