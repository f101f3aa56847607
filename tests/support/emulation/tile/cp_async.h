// Host shim of kernels/tile/cp_async.h: copies are queued per thread and land when the thread
// waits for their group (simt_emulator.hpp), as on the device only the wait guarantees them.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

inline void cp_async_cg_16(u32 smem_destination, const void* global_source, bool in_bounds) {
  ::tilefmha::emulation::cta().async_copy(shared_pointer(smem_destination), global_source,
                                          in_bounds);
}

inline void cp_async_commit_group() {
  ::tilefmha::emulation::cta().async_commit();
}

template <int PendingGroups>
inline void cp_async_wait_group() {
  static_assert(PendingGroups >= 0 && PendingGroups <= 7, "cp.async.wait_group takes 0..7");
  ::tilefmha::emulation::cta().async_wait(PendingGroups);
}

inline void cp_async_wait_all() {
  ::tilefmha::emulation::cta().async_commit();
  ::tilefmha::emulation::cta().async_wait(0);
}

}  // namespace tilefmha::tile
