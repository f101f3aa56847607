// A counter in global memory that orders work between CTAs (sm_70+ memory model): one CTA
// waits until it reads a value with acquire semantics, another raises it with release
// semantics after its writes. Where the writes were made by the async proxy (bulk copies), the
// writer completes them, then fences the proxies, before it raises the counter; the waiter
// fences the proxies before its own bulk copies.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

TILEFMHA_DEVICE int load_acquire_gpu(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

TILEFMHA_DEVICE void add_release_gpu(int* address, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

TILEFMHA_DEVICE void wait_until_equal(const int* address, int value) {
  while (load_acquire_gpu(address) != value) {
  }
}

}  // namespace tilefmha::tile
