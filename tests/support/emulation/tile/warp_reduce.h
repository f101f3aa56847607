// Host shim of kernels/tile/warp_reduce.h: shfl.sync.bfly through the emulated warp's slots.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

constexpr u32 full_warp_mask = 0xFFFFFFFFu;

inline float shuffle_xor(float value, int lane_mask) {
  auto& cta = ::tilefmha::emulation::cta();
  const int thread = int(cta.thread_index().x);
  const int base = thread & ~31;
  cta.slot(thread).f[0] = value;
  cta.sync_warp();
  const float other = cta.slot(base + ((thread & 31) ^ lane_mask)).f[0];
  cta.sync_warp();
  return other;
}

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
