// mma.sync m16n8k16 with fp32 accumulation (sm_80+), one warp per tile:
//   acc[16x8] += A[16x16] * B[16x8], A row-major, B column-major.
// Fragment layout (group = lane / 4, pair = lane % 4):
//   a[0]: A[group][2*pair..+1]     a[1]: A[group+8][2*pair..+1]
//   a[2]: A[group][2*pair+8..+9]   a[3]: A[group+8][2*pair+8..+9]
//   b[0]: B[2*pair..+1][group]     b[1]: B[2*pair+8..+9][group]
//   acc[0..1]: C[group][2*pair..+1]   acc[2..3]: C[group+8][2*pair..+1]
#pragma once

#include "tile/numeric_types.h"

namespace tilefmha::tile {

TILEFMHA_DEVICE void mma_m16n8k16_f16(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

TILEFMHA_DEVICE void mma_m16n8k16_bf16(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Element-type-directed form: T is half_t or bfloat16_t.
template <class T>
TILEFMHA_DEVICE void mma_m16n8k16(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  static_assert(same_type<T, half_t>::value || same_type<T, bfloat16_t>::value,
                "mma_m16n8k16 takes half_t or bfloat16_t");
  if constexpr (same_type<T, half_t>::value) {
    mma_m16n8k16_f16(acc, a, b);
  } else {
    mma_m16n8k16_bf16(acc, a, b);
  }
}

}  // namespace tilefmha::tile
