// bwd_dot_do_o: D[b, h, i] = sum_d dO[b, i, h, d] * O[b, i, h, d] in fp32, a row on a group of
// lanes (RowLanes: a warp takes several short rows at once), 16-byte loads. The same pass zeroes
// the row's fp32 dQ accumulator (every slice), so that the dq_dk_dv stage that follows on the
// stream can add into it: the run needs no memset. With dSink it also writes the CTA's per-head
// partial sums of exp(sink - lse) * D (bwd_params.h), which bwd_convert_dq reduces.
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

// Row `at`'s term exp(sink - lse) * D of dsink = -sum(terms): its sink probability times D. Rows
// outside every sequence (group-mode padding past seqstart_q[batch]) have no forward LSE, and a
// row that saw nothing (LSE -inf; impossible with a finite sink) no gradient: both add 0.
TILEFMHA_DEVICE float bwd_sink_term(const BwdParams& p, const BwdRow& at, float d) {
  const FwdParams& f = p.fwd;
  if (f.seqstart_q != nullptr && (at.seq < f.seqstart_q[0] || at.seq >= f.seqstart_q[f.batch]))
    return 0.0f;
  const float lse = f.lse[at.batch * f.lse_batch_stride + at.head * f.lse_head_stride +
                          at.seq * f.lse_seq_stride];
  if (lse == -tile::bits_as_float(0x7F800000u)) return 0.0f;
  return expf(f.sink_logits[at.head * f.sink_stride] - lse) * d;
}

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
  // Each row's dSink term, by its place in the CTA (0 past the rows), so that the per-head
  // sums below run in a fixed order. Spelled static (as CUDA makes it anyway) so that the host
  // emulation, where __shared__ means nothing, shares it between the CTA's threads too.
  static __shared__ float sink_terms[Traits::kBlockM];
  const bool dsink = p.dsink_partials != nullptr;
  const RowLanes lanes = RowLanes::of(f.hdim_v / 8, lane);
  // Passes are warp-uniform (base counts whole warps' rows): every lane reaches the row sum's
  // shuffles equally often, whether or not its row exists.
  for (int base = warp * lanes.rows; base < Traits::kBlockM; base += Traits::kWarps * lanes.rows) {
    const int local = base + lanes.group;
    const long long row = first + local;
    const bool present = local < Traits::kBlockM && row < rows;
    const BwdRow at = BwdRow::of(present ? row : first, p);
    float sum = 0.0f;
    if (present) {
      const T* o = static_cast<const T*>(f.o) + at.offset(f.o_strides);
      const T* d_o = static_cast<const T*>(p.d_o) + at.offset(p.d_o_strides);
      for (long long c = lanes.sub * 8; c < f.hdim_v; c += lanes.lanes * 8) {
        float a[8], b[8];
        load8<T>(o + c, a);
        load8<T>(d_o + c, b);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum += a[e] * b[e];
      }
    }
    sum = lanes.row_sum(sum);
    if (!present) {
      // not return: the whole CTA meets the barrier of the dSink sums
      if (lanes.sub == 0 && local < Traits::kBlockM) sink_terms[local] = 0.0f;
      continue;
    }
    if (lanes.sub == 0) {
      p.d[at.batch * p.d_batch_stride + at.head * p.d_head_stride + at.seq * p.d_seq_stride] = sum;
      if (dsink) sink_terms[local] = bwd_sink_term(p, at, sum);
    }

    float* acc = p.dq_acc + at.offset(p.dq_acc_strides);
    for (long long slice = 0; slice < p.dq_acc_slices; ++slice) {
      for (long long c = lanes.sub * 4; c < f.hdim_q; c += lanes.lanes * 4)
        *reinterpret_cast<float4*>(acc + slice * p.dq_acc_slice_stride + c) =
            make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  if (!dsink) return;
  __syncthreads();
  // Rows are numbered head-fastest: head h's rows in this CTA sit at local = first_local(h) +
  // k * nhead_q. Every slot is written, zeros included, so the partials need no clearing.
  const long long heads = f.nhead_q;
  const long long first_head = first % heads;
  for (long long h = threadIdx.x; h < heads; h += Traits::kThreads) {
    float total = 0.0f;
    for (long long local = (h - first_head + heads) % heads; local < Traits::kBlockM;
         local += heads)
      total += sink_terms[local];
    p.dsink_partials[h * p.dsink_partial_count + blockIdx.x] = total;
  }
}

}  // namespace tilefmha::fmha
