// Butterfly reductions with shfl.sync. In the mma.sync accumulator layout one row of a tile is
// spread over the 4 lanes of a quad (lanes 4g..4g+3), so row max / row sum of a softmax need
// only the two quad steps; the full-warp forms serve reductions over all 32 lanes.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

constexpr u32 full_warp_mask = 0xFFFFFFFFu;

TILEFMHA_DEVICE float shuffle_xor(float value, int lane_mask) {
  float other;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, %3;\n"
               : "=f"(other)
               : "f"(value), "r"(lane_mask), "r"(full_warp_mask));
  return other;
}

TILEFMHA_DEVICE float max_f32(float a, float b) {
  float larger;
  asm("max.f32 %0, %1, %2;" : "=f"(larger) : "f"(a), "f"(b));
  return larger;
}

TILEFMHA_DEVICE float quad_max(float value) {
  value = max_f32(value, shuffle_xor(value, 1));
  return max_f32(value, shuffle_xor(value, 2));
}

TILEFMHA_DEVICE float quad_sum(float value) {
  value += shuffle_xor(value, 1);
  return value + shuffle_xor(value, 2);
}

TILEFMHA_DEVICE float warp_max(float value) {
  for (int lane_mask = 16; lane_mask >= 1; lane_mask /= 2) {
    value = max_f32(value, shuffle_xor(value, lane_mask));
  }
  return value;
}

TILEFMHA_DEVICE float warp_sum(float value) {
  for (int lane_mask = 16; lane_mask >= 1; lane_mask /= 2) {
    value += shuffle_xor(value, lane_mask);
  }
  return value;
}

}  // namespace tilefmha::tile
