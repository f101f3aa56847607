// bwd_convert_dq: dQ = the fp32 accumulator in the output dtype, one warp per row. In
// deterministic mode the accumulator holds one slice per key block, summed here in slice order
// (a fixed order, so the bits never depend on scheduling).
#pragma once

#include "fmha/bwd_params.h"
#include "fmha/bwd_rows.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

template <class Element_, int BlockM, int Warps>
struct ConvertDqTraits {
  using Element = Element_;
  static constexpr int kBlockM = BlockM;  // rows per CTA
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
};

template <class Traits>
TILEFMHA_DEVICE void bwd_convert_dq(const BwdParams& p) {
  using T = typename Traits::Element;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const long long rows = p.row_batches * p.row_seqlen * p.fwd.nhead_q;
  const long long first = (long long)blockIdx.x * Traits::kBlockM;
  for (int local = warp; local < Traits::kBlockM; local += Traits::kWarps) {
    const long long row = first + local;
    if (row >= rows) return;
    const BwdRow at = BwdRow::of(row, p);
    const float* acc = p.dq_acc + at.offset(p.dq_acc_strides);
    T* dq = static_cast<T*>(p.dq) + at.offset(p.dq_strides);
    for (long long c = lane * 8; c < p.fwd.hdim_q; c += 32 * 8) {
      float sum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      // Where the sm90_ws kernel put chunk c / 8 of this row (bwd_params.h).
      const long long stored =
          p.dq_acc_swizzled ? (c & ~63ll) | (((c >> 3) & 7) ^ (at.seq & 7)) << 3 : c;
      for (long long slice = 0; slice < p.dq_acc_slices; ++slice) {
        const float* from = acc + slice * p.dq_acc_slice_stride + stored;
        const float4 lo = *reinterpret_cast<const float4*>(from);
        const float4 hi = *reinterpret_cast<const float4*>(from + 4);
        sum[0] += lo.x;
        sum[1] += lo.y;
        sum[2] += lo.z;
        sum[3] += lo.w;
        sum[4] += hi.x;
        sum[5] += hi.y;
        sum[6] += hi.z;
        sum[7] += hi.w;
      }
      store8<T>(dq + c, sum);
    }
  }
}

}  // namespace tilefmha::fmha
