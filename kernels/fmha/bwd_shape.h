// Shape facts of the sm80_mma backward kernel (fmha/bwd_sm80.h) that host and device must agree
// on. Plain C++, no includes beyond the forward's head-dim padding.
#pragma once

#include "fmha/fwd_shape.h"

namespace tilefmha::fmha {

// K and V of the CTA's key block, Q and dO of one query block, dS^T of the pair of blocks (16-bit
// tiles), then the query block's LSE and D (fp32).
constexpr int bwd_sm80_shared_bytes(int hdim_q, int hdim_v, int block_m, int block_n,
                                    int element_bytes) {
  const int dq = padded_head_dim(hdim_q);
  const int dv = padded_head_dim(hdim_v);
  const int tiles = (block_n * (dq + dv) + block_m * (dq + dv) + block_n * block_m) * element_bytes;
  return tiles + 2 * block_m * 4;
}

}  // namespace tilefmha::fmha
