// bwd_convert_dq: dQ = the fp32 accumulator in the output dtype, a row on a group of lanes
// (RowLanes). In deterministic mode the accumulator holds one slice per key block, summed here
// in slice order (a fixed order, so the bits never depend on scheduling). With dSink, CTA h (and
// h + grid, ...) first sums head h's partials from bwd_dot_do_o, also in a fixed order.
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

// dsink[h] = -(sum of head h's partials), each thread summing a fixed stride of them in double
// and the CTA folding the threads' sums by a fixed tree: bitwise the same on every run. The
// whole CTA takes part (barriers), so this runs before any thread may leave.
template <class Traits>
TILEFMHA_DEVICE void bwd_reduce_dsink(const BwdParams& p) {
  // static: one array per CTA in the host emulation too (bwd_dot_do_o.h's sink_terms).
  static __shared__ double sums[Traits::kThreads];
  const int t = threadIdx.x;
  for (long long h = blockIdx.x; h < p.fwd.nhead_q; h += gridDim.x) {
    const float* partials = p.dsink_partials + h * p.dsink_partial_count;
    double sum = 0.0;
    // Unrolled so that several loads are in flight: a head has one partial per dot CTA.
#pragma unroll 4
    for (long long c = t; c < p.dsink_partial_count; c += Traits::kThreads) sum += partials[c];
    sums[t] = sum;
    __syncthreads();
    // Halving with the odd element carried: lanes [0, width - half) add lane + half, which no
    // lane writes in the same step.
    for (int width = Traits::kThreads; width > 1;) {
      const int half = (width + 1) / 2;
      if (t < width - half) sums[t] += sums[t + half];
      __syncthreads();
      width = half;
    }
    if (t == 0) p.dsink[h * p.dsink_stride] = static_cast<float>(-sums[0]);
    __syncthreads();  // sums[0] is read before the next head overwrites it
  }
}

template <class Traits>
TILEFMHA_DEVICE void bwd_convert_dq(const BwdParams& p) {
  if (p.dsink_partials != nullptr) bwd_reduce_dsink<Traits>(p);
  using T = typename Traits::Element;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const long long rows = p.row_batches * p.row_seqlen * p.fwd.nhead_q;
  const long long first = (long long)blockIdx.x * Traits::kBlockM;
  const RowLanes lanes = RowLanes::of(p.fwd.hdim_q / 8, lane);
  for (int local = warp * lanes.rows + lanes.group; local < Traits::kBlockM;
       local += Traits::kWarps * lanes.rows) {
    const long long row = first + local;
    if (row >= rows) return;
    const BwdRow at = BwdRow::of(row, p);
    const float* acc = p.dq_acc + at.offset(p.dq_acc_strides);
    T* dq = static_cast<T*>(p.dq) + at.offset(p.dq_strides);
    for (long long c = lanes.sub * 8; c < p.fwd.hdim_q; c += lanes.lanes * 8) {
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
