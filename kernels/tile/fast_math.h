// Approximate transcendental functions of the SFU. Softmax works in base 2 (the scale is
// pre-multiplied by log2(e)), so exp2 is one MUFU.EX2; .ftz flushes denormals, which are far
// below the precision the fp16/bf16 outputs can hold.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

TILEFMHA_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

TILEFMHA_DEVICE float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

TILEFMHA_DEVICE float reciprocal_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace tilefmha::tile
