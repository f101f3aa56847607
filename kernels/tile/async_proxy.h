// Fences between the generic proxy (ordinary loads/stores) and the async proxy (TMA, wgmma
// operand reads). Shared memory written by ordinary stores must be fenced before wgmma or a
// TMA store reads it; without the fence the async unit may see stale data.
#pragma once

#include "tile/device.h"

#if defined(TILEFMHA_HAS_SM90)

namespace tilefmha::tile {

TILEFMHA_DEVICE void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

TILEFMHA_DEVICE void fence_proxy_async() {
  asm volatile("fence.proxy.async;\n" ::: "memory");
}

}  // namespace tilefmha::tile

#endif  // TILEFMHA_HAS_SM90
