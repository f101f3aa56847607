// What the gradient kernels (bwd_sm80.h, bwd_sm90.h) stage per query row of a block: the
// forward's LSE in log2 units and D = rowsum(dO * O).
#pragma once

#include "fmha/bwd_params.h"
#include "fmha/logits.h"
#include "fmha/seq_info.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

struct BwdRowStats {
  float lse2;
  float d;

  // Query i of the sequence, for one query head (lse_head, d_head: that head's offsets). A row
  // past the sequence, or one that saw no key (LSE = -inf), has no gradient: LSE +inf makes its
  // P exactly 0.
  TILEFMHA_DEVICE static BwdRowStats of(const BwdParams& bp, const SeqInfo& seq, long long lse_head,
                                        long long d_head, int i) {
    const FwdParams& p = bp.fwd;
    const float inf = tile::bits_as_float(0x7F800000u);
    if (i >= seq.len_q) return {inf, 0.0f};
    const long long row = seq.q_start + i;
    const float lse = p.lse[lse_head + row * p.lse_seq_stride];
    return {lse == -inf ? inf : lse * kLog2e, bp.d[d_head + row * bp.d_seq_stride]};
  }
};

}  // namespace tilefmha::fmha
