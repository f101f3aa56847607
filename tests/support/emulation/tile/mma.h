// Host shim of kernels/tile/mma.h: mma.sync m16n8k16 with fp32 accumulation, each lane
// rebuilding A (16x16) and B (16x8) from the warp's fragments (the layout kernels/tile/mma.h
// documents) and accumulating its own four outputs.
#pragma once

#include "tile/device.h"
#include "tile/numeric_types.h"

namespace tilefmha::tile {

namespace emulated {

template <class T>
inline float half_of(u32 packed, int which) {
  float lo, hi;
  unpack2<T>(packed, lo, hi);
  return which ? hi : lo;
}

template <class T>
inline void mma(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  auto& cta = ::tilefmha::emulation::cta();
  const int thread = int(cta.thread_index().x);
  const int base = thread & ~31, lane = thread & 31;
  ::tilefmha::emulation::LaneSlot& mine = cta.slot(thread);
  for (int i = 0; i < 4; ++i) mine.u[i] = a[i];
  mine.u[4] = b[0];
  mine.u[5] = b[1];
  cta.sync_warp();
  auto a_at = [&](int r, int k) {
    const int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    const int holder = (r % 8) * 4 + (k % 8) / 2;
    return half_of<T>(cta.slot(base + holder).u[reg], k & 1);
  };
  auto b_at = [&](int k, int c) {
    const int reg = k >= 8 ? 1 : 0;
    const int holder = c * 4 + (k % 8) / 2;
    return half_of<T>(cta.slot(base + holder).u[4 + reg], k & 1);
  };
  const int group = lane / 4, pair = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int r = group + (e >> 1) * 8, c = 2 * pair + (e & 1);
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += a_at(r, k) * b_at(k, c);
    acc[e] += sum;
  }
  cta.sync_warp();
}

}  // namespace emulated

inline void mma_m16n8k16_f16(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  emulated::mma<half_t>(acc, a, b);
}

inline void mma_m16n8k16_bf16(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  emulated::mma<bfloat16_t>(acc, a, b);
}

template <class T>
inline void mma_m16n8k16(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  emulated::mma<T>(acc, a, b);
}

}  // namespace tilefmha::tile
