// Thread block clusters (sm_90+): a CTA's rank in its cluster, the cluster-wide barrier, and
// reads of another CTA's shared memory (distributed shared memory). Elsewhere these compile to
// nothing, and no kernel that needs them is launched there.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

TILEFMHA_DEVICE u32 cluster_cta_rank() {
  u32 rank = 0;
#if defined(TILEFMHA_HAS_SM90)
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#endif
  return rank;
}

// Every thread of every CTA of the cluster arrives, then waits for all of them. Release and
// acquire: shared-memory writes before it are visible to the cluster's reads after it. Not
// .aligned: the threads of a warp may reach it apart (the producer warp's lanes do).
TILEFMHA_DEVICE void cluster_sync() {
#if defined(TILEFMHA_HAS_SM90)
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// The shared-window address `address` of this CTA, as the same location in CTA `rank`'s shared
// memory (a shared::cluster address).
TILEFMHA_DEVICE u32 cluster_map_shared(u32 address, u32 rank) {
  u32 mapped = address;
#if defined(TILEFMHA_HAS_SM90)
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(mapped) : "r"(address), "r"(rank));
#endif
  return mapped;
}

TILEFMHA_DEVICE float cluster_load_f32(u32 address) {
  float value = 0.0f;
#if defined(TILEFMHA_HAS_SM90)
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(address) : "memory");
#endif
  return value;
}

TILEFMHA_DEVICE void cluster_load_v4(u32 address, float (&value)[4]) {
#if defined(TILEFMHA_HAS_SM90)
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(value[0]), "=f"(value[1]), "=f"(value[2]), "=f"(value[3])
               : "r"(address)
               : "memory");
#else
  value[0] = value[1] = value[2] = value[3] = 0.0f;
#endif
}

}  // namespace tilefmha::tile
