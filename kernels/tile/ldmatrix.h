// ldmatrix: a warp loads 8x8 tiles of 16-bit values from shared memory straight into the
// register layout of mma.sync operands. Lanes 0-7 give the row addresses of tile 0, lanes 8-15
// of tile 1, and so on; each lane receives one 32-bit register (two values) per tile.
// `.trans` delivers each tile transposed (a row-major V tile becomes a column operand).
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

TILEFMHA_DEVICE void ldmatrix_x1(u32 smem_row, u32& r0) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(smem_row));
}

TILEFMHA_DEVICE void ldmatrix_x2(u32 smem_row, u32& r0, u32& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_row));
}

TILEFMHA_DEVICE void ldmatrix_x4(u32 smem_row, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_row));
}

TILEFMHA_DEVICE void ldmatrix_x1_trans(u32 smem_row, u32& r0) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r0)
               : "r"(smem_row));
}

TILEFMHA_DEVICE void ldmatrix_x2_trans(u32 smem_row, u32& r0, u32& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_row));
}

TILEFMHA_DEVICE void ldmatrix_x4_trans(u32 smem_row, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_row));
}

// Array forms matching the mma.sync operand shapes (A: 4 registers, B: 2 registers).
TILEFMHA_DEVICE void ldmatrix_x4(u32 smem_row, u32 (&r)[4]) {
  ldmatrix_x4(smem_row, r[0], r[1], r[2], r[3]);
}
TILEFMHA_DEVICE void ldmatrix_x4_trans(u32 smem_row, u32 (&r)[4]) {
  ldmatrix_x4_trans(smem_row, r[0], r[1], r[2], r[3]);
}
TILEFMHA_DEVICE void ldmatrix_x2(u32 smem_row, u32 (&r)[2]) {
  ldmatrix_x2(smem_row, r[0], r[1]);
}
TILEFMHA_DEVICE void ldmatrix_x2_trans(u32 smem_row, u32 (&r)[2]) {
  ldmatrix_x2_trans(smem_row, r[0], r[1]);
}

#if defined(TILEFMHA_HAS_SM90)
// stmatrix (sm_90): the inverse of ldmatrix_x4, a warp stores four 8x8 tiles of 16-bit values;
// lane l gives the address of row l % 8 of tile l / 8, and register j of lane l holds row l / 4,
// values 2 (l % 4) and 2 (l % 4) + 1 of tile j.
TILEFMHA_DEVICE void stmatrix_x4(u32 smem_row, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_row),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
#endif

}  // namespace tilefmha::tile
