// Host stand-in for kernels/tile/warp_reduce.h (see tests/emulation/README.md): butterfly
// shuffles through the warp's exchange slots.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

constexpr u32 full_warp_mask = 0xFFFFFFFFu;

// Lane (this lane ^ lane_mask)'s value (the hardware's shfl.sync.bfly).
inline float shuffle_xor(float value, int lane_mask) {
  const unsigned lane = threadIdx.x % 32;
  return bits_as_float(emulated_exchange(float_as_bits(value), [&](const unsigned* slots) {
    return slots[lane ^ unsigned(lane_mask)];
  }));
}

// max.f32: NaN only where both are NaN.
inline float max_f32(float a, float b) {
  return a > b ? a : (b > a ? b : (a == a ? a : b));
}

inline float quad_max(float value) {
  value = max_f32(value, shuffle_xor(value, 1));
  return max_f32(value, shuffle_xor(value, 2));
}

inline float quad_sum(float value) {
  value += shuffle_xor(value, 1);
  return value + shuffle_xor(value, 2);
}

inline float warp_max(float value) {
  for (int lane_mask = 16; lane_mask >= 1; lane_mask /= 2)
    value = max_f32(value, shuffle_xor(value, lane_mask));
  return value;
}

inline float warp_sum(float value) {
  for (int lane_mask = 16; lane_mask >= 1; lane_mask /= 2) value += shuffle_xor(value, lane_mask);
  return value;
}

}  // namespace tilefmha::tile
