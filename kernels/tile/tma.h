// TMA (sm_90): cp.async.bulk.tensor copies a box of a tensor described by a tensor map
// (built on the host with cuTensorMapEncodeTiled) between global and shared memory. Loads
// complete on an mbarrier by transaction bytes (see mbarrier.h); stores complete by bulk group.
// Coordinates are element indices, innermost dimension first.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

// Opaque 128-byte tensor map, layout-compatible with the driver's CUtensorMap. Kernels take it
// as `const __grid_constant__ TensorMap` so its address stays in parameter space.
struct alignas(64) TensorMap {
  u64 opaque[16];
};

}  // namespace tilefmha::tile

#if defined(TILEFMHA_HAS_SM90)

namespace tilefmha::tile {

TILEFMHA_DEVICE void tma_prefetch_descriptor(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

TILEFMHA_DEVICE void tma_load_2d(u32 smem_destination, const TensorMap* map, u32 barrier, int c0,
                                 int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(smem_destination),
      "l"(map), "r"(barrier), "r"(c0), "r"(c1)
      : "memory");
}

TILEFMHA_DEVICE void tma_load_3d(u32 smem_destination, const TensorMap* map, u32 barrier, int c0,
                                 int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(smem_destination),
      "l"(map), "r"(barrier), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

TILEFMHA_DEVICE void tma_load_4d(u32 smem_destination, const TensorMap* map, u32 barrier, int c0,
                                 int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_destination),
      "l"(map), "r"(barrier), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

TILEFMHA_DEVICE void tma_load_5d(u32 smem_destination, const TensorMap* map, u32 barrier, int c0,
                                 int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(smem_destination),
      "l"(map), "r"(barrier), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// Stores read shared memory through the async proxy: fence ordinary stores to the source
// first (fence_proxy_async_shared), then commit and wait before reusing the buffer.
TILEFMHA_DEVICE void tma_store_2d(const TensorMap* map, u32 smem_source, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map),
      "r"(smem_source), "r"(c0), "r"(c1)
      : "memory");
}

TILEFMHA_DEVICE void tma_store_3d(const TensorMap* map, u32 smem_source, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          map),
      "r"(smem_source), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

TILEFMHA_DEVICE void tma_store_4d(const TensorMap* map, u32 smem_source, int c0, int c1, int c2,
                                  int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          map),
      "r"(smem_source), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

TILEFMHA_DEVICE void tma_store_5d(const TensorMap* map, u32 smem_source, int c0, int c1, int c2,
                                  int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], "
      "[%1];\n" ::"l"(map),
      "r"(smem_source), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// Non-tensor bulk copies (no map): `bytes` (a multiple of 16) from 16-byte aligned shared memory
// to 16-byte aligned global memory, a plain store or an fp32 add reduction performed by the copy
// engine. Both complete by bulk group, like the tensor stores.
TILEFMHA_DEVICE void bulk_store(void* global_destination, u32 smem_source, u32 bytes) {
  asm volatile(
      "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(global_destination),
      "r"(smem_source), "r"(bytes)
      : "memory");
}

TILEFMHA_DEVICE void bulk_reduce_add_f32(float* global_destination, u32 smem_source, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   global_destination),
               "r"(smem_source), "r"(bytes)
               : "memory");
}

TILEFMHA_DEVICE void tma_store_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most `PendingGroups` store groups still read their shared source.
template <int PendingGroups>
TILEFMHA_DEVICE void tma_store_wait_group_read() {
  static_assert(PendingGroups >= 0 && PendingGroups <= 7, "bulk wait_group takes 0..7");
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(PendingGroups) : "memory");
}

// Waits until at most `PendingGroups` store groups are still writing global memory: needed
// before another block or a later kernel phase reads what was stored.
template <int PendingGroups>
TILEFMHA_DEVICE void tma_store_wait_group() {
  static_assert(PendingGroups >= 0 && PendingGroups <= 7, "bulk wait_group takes 0..7");
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(PendingGroups) : "memory");
}

}  // namespace tilefmha::tile

#endif  // TILEFMHA_HAS_SM90
