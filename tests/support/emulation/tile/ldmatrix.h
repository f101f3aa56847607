// Host shim of kernels/tile/ldmatrix.h: each lane posts its row address, then gathers the
// 32-bit words (or, transposed, the 16-bit element pairs) the instruction would deliver to it.
#pragma once

#include <cstring>

#include "tile/device.h"

namespace tilefmha::tile {

namespace emulated {

inline u16 load_u16(u32 address) {
  u16 value;
  std::memcpy(&value, shared_pointer(address), 2);
  return value;
}

// `matrices` 8x8 matrices of 16-bit values; lane 8 i + r gives the address of row r of matrix i.
inline void ldmatrix(u32 smem_row, u32* out, int matrices, bool transposed) {
  auto& cta = ::tilefmha::emulation::cta();
  const int thread = int(cta.thread_index().x);
  const int base = thread & ~31, lane = thread & 31;
  cta.slot(thread).u[7] = smem_row;
  cta.sync_warp();
  for (int i = 0; i < matrices; ++i) {
    if (!transposed) {
      const u32 row = cta.slot(base + i * 8 + lane / 4).u[7];
      std::memcpy(&out[i], shared_pointer(row + (lane % 4) * 4), 4);
    } else {
      const u32 row_lo = cta.slot(base + i * 8 + 2 * (lane % 4)).u[7];
      const u32 row_hi = cta.slot(base + i * 8 + 2 * (lane % 4) + 1).u[7];
      out[i] =
          u32(load_u16(row_lo + (lane / 4) * 2)) | (u32(load_u16(row_hi + (lane / 4) * 2)) << 16);
    }
  }
  cta.sync_warp();
}

}  // namespace emulated

inline void ldmatrix_x1(u32 smem_row, u32& r0) {
  emulated::ldmatrix(smem_row, &r0, 1, false);
}
inline void ldmatrix_x2(u32 smem_row, u32& r0, u32& r1) {
  u32 r[2];
  emulated::ldmatrix(smem_row, r, 2, false);
  r0 = r[0];
  r1 = r[1];
}
inline void ldmatrix_x4(u32 smem_row, u32& r0, u32& r1, u32& r2, u32& r3) {
  u32 r[4];
  emulated::ldmatrix(smem_row, r, 4, false);
  r0 = r[0];
  r1 = r[1];
  r2 = r[2];
  r3 = r[3];
}
inline void ldmatrix_x1_trans(u32 smem_row, u32& r0) {
  emulated::ldmatrix(smem_row, &r0, 1, true);
}
inline void ldmatrix_x2_trans(u32 smem_row, u32& r0, u32& r1) {
  u32 r[2];
  emulated::ldmatrix(smem_row, r, 2, true);
  r0 = r[0];
  r1 = r[1];
}
inline void ldmatrix_x4_trans(u32 smem_row, u32& r0, u32& r1, u32& r2, u32& r3) {
  u32 r[4];
  emulated::ldmatrix(smem_row, r, 4, true);
  r0 = r[0];
  r1 = r[1];
  r2 = r[2];
  r3 = r[3];
}

inline void ldmatrix_x4(u32 smem_row, u32 (&r)[4]) {
  emulated::ldmatrix(smem_row, r, 4, false);
}
inline void ldmatrix_x4_trans(u32 smem_row, u32 (&r)[4]) {
  emulated::ldmatrix(smem_row, r, 4, true);
}
inline void ldmatrix_x2(u32 smem_row, u32 (&r)[2]) {
  emulated::ldmatrix(smem_row, r, 2, false);
}
inline void ldmatrix_x2_trans(u32 smem_row, u32 (&r)[2]) {
  emulated::ldmatrix(smem_row, r, 2, true);
}

}  // namespace tilefmha::tile
