// setmaxnreg (sm_90a): a warpgroup hands registers back to (dec) or takes them from (inc) the
// block's pool, so producer warpgroups that only issue TMA run lean while the consumer
// warpgroups doing wgmma and softmax get more. Every warp of the warpgroup executes it.
#pragma once

#include "tile/device.h"

#if defined(TILEFMHA_HAS_SM90A)

namespace tilefmha::tile {

template <int RegistersPerThread>
TILEFMHA_DEVICE void warpgroup_registers_increase() {
  static_assert(
      RegistersPerThread >= 24 && RegistersPerThread <= 256 && RegistersPerThread % 8 == 0,
      "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(RegistersPerThread));
}

template <int RegistersPerThread>
TILEFMHA_DEVICE void warpgroup_registers_decrease() {
  static_assert(
      RegistersPerThread >= 24 && RegistersPerThread <= 256 && RegistersPerThread % 8 == 0,
      "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(RegistersPerThread));
}

}  // namespace tilefmha::tile

#endif  // TILEFMHA_HAS_SM90A
