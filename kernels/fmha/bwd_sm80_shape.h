// Column split of the sm80_mma backward (fmha/bwd_sm80.h), shared by host and device: plain C++.
//
// A warp keeps dK and dV of its 16 keys in registers; past 128 columns of either they would
// spill. Wider heads are split into `parts` column parts: the CTA runs parts x (block_n / 16)
// warps, and the warps of one key slice (16 keys) each accumulate one part of dK's and dV's
// columns. Each of them recomputes the slice's S^T and dP^T, which need the full dot products,
// so the two GEMMs of the scores run `parts` times: the price of the split. Q, K, V and dO are
// staged once per CTA and dQ (from the shared dS^T tile) is not split, so no extra memory
// traffic is paid, and the dQ accumulator (and its deterministic slices) sees the same writes.
#pragma once

#include "fmha/fwd_shape.h"

namespace tilefmha::fmha {

// Widest dK or dV part a warp keeps in registers.
constexpr int kBwdSm80PartColumns = 128;

// ceil(max(hdim_q, hdim_v) / 128) over the padded head dims: 1 up to 128, 2 up to 256.
constexpr int bwd_sm80_column_parts(int hdim_q, int hdim_v) {
  const int dq = padded_head_dim(hdim_q);
  const int dv = padded_head_dim(hdim_v);
  const int widest = dq > dv ? dq : dv;
  return (widest + kBwdSm80PartColumns - 1) / kBwdSm80PartColumns;
}

// Warps of a CTA: one per 16 keys and column part.
constexpr int bwd_sm80_warps(int hdim_q, int hdim_v, int block_n) {
  return bwd_sm80_column_parts(hdim_q, hdim_v) * (block_n / 16);
}

}  // namespace tilefmha::fmha
