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

}  // namespace tilefmha::tile

#include "support/emulated_warp_reductions.hpp"
