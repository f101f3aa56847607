// mbarrier (sm_90 forms): a shared-memory barrier object with an arrival count and a
// transaction byte count. TMA copies signal completion by decrementing the byte count, so a
// consumer waits for "all expected bytes landed and all producers arrived" in one object.
// Waiting is by phase parity: the barrier flips phase each time it completes.
#pragma once

#include "tile/device.h"

#if defined(TILEFMHA_HAS_SM90)

namespace tilefmha::tile {

// One thread initialises; the init must be fenced (mbarrier_init_fence) and the block
// synchronised before any other thread or the TMA unit uses the barrier.
TILEFMHA_DEVICE void mbarrier_init(u32 barrier, u32 expected_arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(expected_arrivals)
               : "memory");
}

TILEFMHA_DEVICE void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

TILEFMHA_DEVICE void mbarrier_arrive(u32 barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// Arrives and raises the expected transaction bytes in one step: what the thread that issues
// a TMA load does before (or right after) issuing it.
TILEFMHA_DEVICE void mbarrier_arrive_expect_tx(u32 barrier, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
}

// Raises the expected transaction bytes without arriving.
TILEFMHA_DEVICE void mbarrier_expect_tx(u32 barrier, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(barrier),
               "r"(bytes)
               : "memory");
}

// True once the phase with parity `phase_parity` has completed. May return false spuriously
// after a hardware time limit, so callers loop (mbarrier_wait).
TILEFMHA_DEVICE bool mbarrier_try_wait(u32 barrier, u32 phase_parity) {
  u32 completed;
  asm volatile(
      "{\n .reg .pred done;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%1], %2;\n"
      " selp.u32 %0, 1, 0, done;\n}\n"
      : "=r"(completed)
      : "r"(barrier), "r"(phase_parity)
      : "memory");
  return completed != 0;
}

TILEFMHA_DEVICE void mbarrier_wait(u32 barrier, u32 phase_parity) {
  while (!mbarrier_try_wait(barrier, phase_parity)) {
  }
}

}  // namespace tilefmha::tile

#endif  // TILEFMHA_HAS_SM90
