// What both host emulations of the kernels (tests/support/emulation: fibers; tests/emulation:
// std::threads) put in place of kernels/tile/warp_reduce.h's reductions: max.f32's NaN rule and
// the butterfly reductions, built on the emulation's own shuffle_xor, which the including shim
// defines first.
#pragma once

namespace tilefmha::tile {

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
