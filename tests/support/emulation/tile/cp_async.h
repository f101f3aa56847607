// Host shim of kernels/tile/cp_async.h: copies land at once, so waits have nothing to wait for.
#pragma once

#include <cstring>

#include "tile/device.h"

namespace tilefmha::tile {

inline void cp_async_cg_16(u32 smem_destination, const void* global_source, bool in_bounds) {
  if (in_bounds)
    std::memcpy(shared_pointer(smem_destination), global_source, 16);
  else
    std::memset(shared_pointer(smem_destination), 0, 16);
}

inline void cp_async_commit_group() {}

template <int PendingGroups>
inline void cp_async_wait_group() {
  static_assert(PendingGroups >= 0 && PendingGroups <= 7, "cp.async.wait_group takes 0..7");
}

inline void cp_async_wait_all() {}

}  // namespace tilefmha::tile
