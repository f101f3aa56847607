// The accurate fp32 forward kernel on CUDA cores (no tf32), one CTA per (query block, query
// head, sequence):
//   * the Q tile is loaded once into shared memory; each visible key block is staged as one K
//     and one V tile (fwd_simt_tile.h: plain 4-byte loads, so no alignment beyond the element
//     and any 64-bit strides), and only the key blocks the mask leaves visible are visited;
//   * 8 lanes share each query row: a thread computes S for its rows and key pairs with fp32
//     FMAs, the row max and sum reduce over the 8 lanes, and O += P V takes each P element from
//     its owner lane by shuffle, so P never touches shared memory;
//   * online softmax in base 2 with the full-precision exp2f / log2f and IEEE division: the
//     result keeps fp32 accuracy (the 2e-5 tolerance of fp32 outputs);
//   * the epilogue normalizes O in registers and writes it and LSE directly.
// Features enter as the hooks of Traits, the same mask, logits and dropout hooks as the
// tensor-core kernels (fmha/mask.h, fmha/logits.h, fmha/dropout.h).
#pragma once

#include "fmha/dropout.h"
#include "fmha/fwd_params.h"
#include "fmha/fwd_simt_tile.h"
#include "fmha/fwd_simt_traits.h"
#include "fmha/logits.h"
#include "fmha/mask.h"
#include "fmha/seq_info.h"
#include "tile/device.h"

namespace tilefmha::fmha {

template <class Traits>
TILEFMHA_DEVICE void fwd_simt(const FwdParams& p) {
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kBlockK = Traits::kBlockK;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kDq = Traits::kDq;
  constexpr int kDv = Traits::kDv;
  constexpr int kRows = Traits::kRows;
  constexpr int kKeys = Traits::kKeys;
  constexpr int kCols = Traits::kCols;
  constexpr int kRowSlots = Traits::kRowSlots;
  constexpr int kLanesPerRow = Traits::kLanesPerRow;
  const float minus_infinity = tile::bits_as_float(0xFF800000u);

  extern __shared__ __align__(16) unsigned char shared[];
  float* const smem_q = reinterpret_cast<float*>(shared);  // [kBlockM][kDq], swizzled
  float* const smem_k = smem_q + kBlockM * kDq;            // [kBlockN][kDq], swizzled
  float* const smem_v = smem_k + kBlockN * kDq;            // [kBlockN][kDv]

  // Later query blocks see more keys under causal masks: schedule them first.
  const int m_begin = (gridDim.x - 1 - blockIdx.x) * kBlockM;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, b);
  if (m_begin >= seq.len_q) return;

  const int thread = threadIdx.x;
  const int row_slot = thread / kLanesPerRow;  // rows row_slot + kRowSlots * r
  const int row_lane = thread % kLanesPerRow;  // key pairs and O columns of this lane
  const int octet_base = (thread & 31) & ~(kLanesPerRow - 1);  // first lane of the row's octet
  auto row_of = [&](int r) { return row_slot + kRowSlots * r; };
  // Key c of this thread within a block: pairs (2 * lane, +1), then the same 16 keys further.
  auto key_of = [&](int c) { return 2 * row_lane + (c & 1) + 16 * (c >> 1); };

  const SeqInfo::Operands<float> operands = seq.operands<float>(p, h, m_begin);
  const float* q = operands.q;
  const float* k = operands.k;
  const float* v = operands.v;

  const typename Traits::Mask mask(p, seq, m_begin, kBlockM);
  const KeyBlocks blocks = mask.key_blocks(kBlockN);
  const int steps = blocks.count();
  const typename Traits::Logits logits(p, seq, b, h);
  const typename Traits::Dropout dropout(p, b, h);
  const int hdim_q = int(p.hdim_q);

  load_simt_tile<kBlockM, kDq, kThreads, true, Traits::kPadSeqlenQ, Traits::kPadHdimQ>(
      smem_q, q, p.q_strides.seq, seq.len_q - m_begin, hdim_q, thread);

  float o[kRows][kCols];
  float row_max[kRows];  // base-2 running max of each row
  float row_sum[kRows];  // this lane's partial sums; octet-reduced in the epilogue
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int cc = 0; cc < kCols; ++cc) o[r][cc] = 0.0f;
    row_max[r] = minus_infinity;
    row_sum[r] = 0.0f;
  }

  for (int step = 0; step < steps; ++step) {
    const int key_begin = blocks.block(step) * kBlockN;
    __syncthreads();  // every thread is done with the previous K/V block
    load_simt_tile<kBlockN, kDq, kThreads, true, Traits::kPadSeqlenK, Traits::kPadHdimQ>(
        smem_k, k + key_begin * p.k_strides.seq, p.k_strides.seq, seq.len_k - key_begin, hdim_q,
        thread);
    load_simt_tile<kBlockN, kDv, kThreads, false, Traits::kPadSeqlenK, Traits::kPadHdimV>(
        smem_v, v + key_begin * p.v_strides.seq, p.v_strides.seq, seq.len_k - key_begin,
        int(p.hdim_v), thread);
    __syncthreads();

    // S = Q K^T over the real head dim (rounded up to kBlockK; the padding reads as zeros).
    float s[kRows][kKeys];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kKeys; ++c) s[r][c] = 0.0f;
    }
    for (int d0 = 0; d0 < hdim_q; d0 += kBlockK) {
#pragma unroll
      for (int dd = 0; dd < kBlockK; ++dd) {
        const int d = d0 + dd;
        float qv[kRows], kv[kKeys];
#pragma unroll
        for (int r = 0; r < kRows; ++r) qv[r] = smem_q[simt_tile_offset<kDq, true>(row_of(r), d)];
#pragma unroll
        for (int c = 0; c < kKeys; ++c) kv[c] = smem_k[simt_tile_offset<kDq, true>(key_of(c), d)];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int c = 0; c < kKeys; ++c) s[r][c] = fmaf(qv[r], kv[c], s[r][c]);
        }
      }
    }

    // Logits (base 2), then the mask on boundary blocks.
    const bool boundary = mask.block_needs_mask(key_begin, kBlockN);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kKeys; ++c) {
        const int i = m_begin + row_of(r);
        const int j = key_begin + key_of(c);
        s[r][c] = logits(s[r][c], i, j);
        if (boundary && !mask.visible(i, j)) s[r][c] = minus_infinity;
      }
    }

    // Online softmax: new running max, rescale what was accumulated, numerators in place.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float block_max = row_max[r];
#pragma unroll
      for (int c = 0; c < kKeys; ++c) block_max = tile::max_f32(block_max, s[r][c]);
      block_max = octet_max(block_max);
      // A row with nothing visible yet keeps max -inf; subtracting 0 keeps exp2 at 0, not NaN.
      const float base = block_max == minus_infinity ? 0.0f : block_max;
      const float correction = exp2f(row_max[r] - base);
      row_max[r] = block_max;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kKeys; ++c) {
        s[r][c] = exp2f(s[r][c] - base);
        sum += s[r][c];
      }
      row_sum[r] = row_sum[r] * correction + sum;
#pragma unroll
      for (int cc = 0; cc < kCols; ++cc) o[r][cc] *= correction;
    }

    if constexpr (Traits::Dropout::kEnabled) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int c = 0; c < kKeys; c += 2) {
          dropout.apply_pair(s[r][c], s[r][c + 1], m_begin + row_of(r), key_begin + key_of(c));
        }
      }
    }

    // O += P V: key jj of the block lives in lane (jj % 16) / 2 of the row's octet, slot
    // 2 * (jj / 16) + jj % 2; every lane of the octet takes it from there.
#pragma unroll
    for (int jj = 0; jj < kBlockN; ++jj) {
      const int owner = octet_base + (jj % 16) / 2;
      const int slot = 2 * (jj / 16) + (jj & 1);
      float pj[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) pj[r] = shuffle_index(s[r][slot], owner);
#pragma unroll
      for (int cc = 0; cc < kCols; ++cc) {
        const float vj = smem_v[jj * kDv + row_lane + kLanesPerRow * cc];
#pragma unroll
        for (int r = 0; r < kRows; ++r) o[r][cc] = fmaf(pj[r], vj, o[r][cc]);
      }
    }
  }

  // Epilogue: normalize, write O and LSE straight from registers.
  float* out = static_cast<float*>(p.o) + seq.view_batch * p.o_strides.batch +
               (seq.q_start + m_begin) * p.o_strides.seq + h * p.o_strides.head;
  const int hdim_v = int(p.hdim_v);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float total = octet_sum(row_sum[r]);
    float max2 = row_max[r];
    float weight = 1.0f;  // share of the keys once the sink logit joins the denominator
    if constexpr (Traits::kSinkLogit) {
      const float sink2 = p.sink_logits[h * p.sink_stride] * kLog2e;
      const float joint = tile::max_f32(max2, sink2);
      weight = exp2f(max2 - joint);
      total = total * weight + exp2f(sink2 - joint);
      max2 = joint;
    }
    // A NaN total (a NaN among the logits this row read) counts as "any", so that it
    // reaches O and LSE; only a row that saw no key (total 0) writes O = 0 and LSE = -inf.
    const bool any = !(total <= 0.0f);
    const float factor = any ? dropout.keep_scale() * weight / total : 0.0f;
    const int row = row_of(r);
    if (m_begin + row >= seq.len_q) continue;
    float* out_row = out + row * p.o_strides.seq;
#pragma unroll
    for (int cc = 0; cc < kCols; ++cc) {
      const int col = row_lane + kLanesPerRow * cc;
      if (!Traits::kPadHdimV || col < hdim_v) out_row[col] = o[r][cc] * factor;
    }
    if constexpr (Traits::kStoreLse) {
      if (row_lane == 0) {
        const float lse = any ? (max2 + log2f(total)) * kLn2 : minus_infinity;
        p.lse[seq.view_batch * p.lse_batch_stride + h * p.lse_head_stride +
              (seq.q_start + m_begin + row) * p.lse_seq_stride] = lse;
      }
    }
  }
}

}  // namespace tilefmha::fmha
