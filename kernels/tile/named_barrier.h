// Named barriers let a subset of a block's warps synchronise (producer/consumer warpgroups)
// without stopping the rest. Id 0 is the one __syncthreads uses, so kernels take ids 1..15;
// `threads` counts every participating thread and is a multiple of 32.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

TILEFMHA_DEVICE void named_barrier_sync(u32 barrier_id, u32 threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(barrier_id), "r"(threads) : "memory");
}

// Signals arrival without waiting: the producer side of a producer/consumer hand-off.
TILEFMHA_DEVICE void named_barrier_arrive(u32 barrier_id, u32 threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(barrier_id), "r"(threads) : "memory");
}

}  // namespace tilefmha::tile
