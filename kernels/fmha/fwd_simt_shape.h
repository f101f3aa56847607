// Shape facts of the simt_f32 forward kernel that host and device must agree on: the thread
// layout and the shared-memory size, as constexpr functions of the kernel's identity. Plain C++,
// no includes beyond fwd_shape.h, so the launch code uses the formulas of the kernel it launches.
#pragma once

#include "fmha/fwd_shape.h"

namespace tilefmha::fmha {

// Eight lanes share each query row: a row's max and sum reduce in three butterfly steps, and the
// eight lanes read eight different K rows (or V columns) at once.
constexpr int kSimtLanesPerRow = 8;

// fp32 tiles: Q [block_m, dq], then one K [block_n, dq] and one V [block_n, dv] block. O stays in
// registers and goes straight to global memory.
constexpr int fwd_simt_shared_bytes(int hdim_q, int hdim_v, int block_m, int block_n) {
  const int dq = padded_head_dim(hdim_q);
  const int dv = padded_head_dim(hdim_v);
  return (block_m * dq + block_n * (dq + dv)) * 4;
}

// fp32 values a thread holds across the main loop: its rows' O columns and S scores.
constexpr int fwd_simt_accumulators(int hdim_v, int block_m, int block_n, int warps) {
  const int row_slots = warps * 32 / kSimtLanesPerRow;
  const int rows = block_m / row_slots;
  return rows * (padded_head_dim(hdim_v) / kSimtLanesPerRow + block_n / kSimtLanesPerRow);
}

}  // namespace tilefmha::fmha
