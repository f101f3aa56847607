// cp.async (sm_80+): asynchronous global -> shared copies that bypass registers. Copies issued
// between two commits form a group; wait_group<N> blocks until at most N groups are in flight,
// which is how a multi-stage pipeline keeps N tiles loading while one is consumed.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

// 16 bytes through L2 only (.cg, no L1 allocation: streamed tiles are read once per block).
// When `in_bounds` is false nothing is read and the 16 shared bytes are zero-filled, so a tile
// edge past the end of a sequence needs no separate clearing pass.
TILEFMHA_DEVICE void cp_async_cg_16(u32 smem_destination, const void* global_source,
                                    bool in_bounds) {
  const u32 source_bytes = in_bounds ? 16u : 0u;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_destination),
               "l"(global_source), "r"(source_bytes)
               : "memory");
}

TILEFMHA_DEVICE void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int PendingGroups>
TILEFMHA_DEVICE void cp_async_wait_group() {
  static_assert(PendingGroups >= 0 && PendingGroups <= 7, "cp.async.wait_group takes 0..7");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PendingGroups) : "memory");
}

TILEFMHA_DEVICE void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace tilefmha::tile
