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

}  // namespace tilefmha::tile

#include "support/emulated_warp_reductions.hpp"
