// bwd_dot_do_o: D[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d] in fp32, one warp per row,
// 16-byte loads. The same pass zeroes the row's fp32 dQ accumulator (every slice), so that the
// dq_dk_dv stage that follows on the stream can add into it: the run needs no memset.
#pragma once

#include "fmha/bwd_params.h"
#include "fmha/bwd_rows.h"
#include "tile/numeric_types.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

template <class Element_, int BlockM, int Warps>
struct DotDoOTraits {
  using Element = Element_;
  static constexpr int kBlockM = BlockM;  // rows per CTA
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
};

template <class Traits>
TILEFMHA_DEVICE void bwd_dot_do_o(const BwdParams& p) {
  using T = typename Traits::Element;
  const FwdParams& f = p.fwd;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const long long rows = p.row_batches * p.row_seqlen * f.nhead_q;
  const long long first = (long long)blockIdx.x * Traits::kBlockM;
  // The deterministic Hopper kernel's ordering counters start from zero on every run.
  for (long long i = (long long)blockIdx.x * Traits::kThreads + threadIdx.x;
       i < p.dq_semaphore_count; i += (long long)gridDim.x * Traits::kThreads)
    p.dq_semaphores[i] = 0;
  for (int local = warp; local < Traits::kBlockM; local += Traits::kWarps) {
    const long long row = first + local;
    if (row >= rows) return;
    const BwdRow at = BwdRow::of(row, p);
    const T* o = static_cast<const T*>(f.o) + at.offset(f.o_strides);
    const T* d_o = static_cast<const T*>(p.d_o) + at.offset(p.d_o_strides);
    float sum = 0.0f;
    for (long long c = lane * 8; c < f.hdim_v; c += 32 * 8) {
      float a[8], b[8];
      load8<T>(o + c, a);
      load8<T>(d_o + c, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += a[e] * b[e];
    }
    sum = tile::warp_sum(sum);
    if (lane == 0)
      p.d[at.batch * p.d_batch_stride + at.head * p.d_head_stride + at.seq * p.d_seq_stride] = sum;

    float* acc = p.dq_acc + at.offset(p.dq_acc_strides);
    for (long long slice = 0; slice < p.dq_acc_slices; ++slice) {
      for (long long c = lane * 4; c < f.hdim_q; c += 32 * 4)
        *reinterpret_cast<float4*>(acc + slice * p.dq_acc_slice_stride + c) =
            make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
}

}  // namespace tilefmha::fmha
