// The portable forward kernel (FlashAttention-2 class, sm_80+), one CTA per (query block, query
// head, sequence):
//   * the Q tile is loaded once (cp.async -> swizzled shared memory -> ldmatrix fragments);
//   * K and V blocks stream through a `stages`-deep cp.async ring; only the key blocks the mask
//     leaves visible are visited, and only boundary blocks are masked per element;
//   * S = Q K^T and O += P V run on mma.sync m16n8k16; P never leaves registers (the S
//     accumulators are re-packed as the A operand) and V is read with ldmatrix.trans;
//   * online softmax in base 2, then the epilogue normalizes, stores O through shared memory
//     and writes LSE.
// Features enter as the hooks of Traits (fmha/fwd_traits.h).
//
// Split-KV (Traits::kSplitKv, family fwd_splitkv): grid z runs over (sequence, split) pairs,
// z = b * num_splits + split, so the splits of one sequence are adjacent CTAs sharing its Q rows
// in L2. A CTA visits the mask's key blocks that lie in its split (fmha/splitkv.h) and writes
// the split's own softmax-normalized O as fp32, with its LSE, into the partials of FwdParams;
// an empty split writes O = 0 and LSE = -inf. With kSplitKv false none of this is compiled.
//
// Paged K/V (Traits::kPaged, families fwd_pagedkv and batch_prefill): K and V blocks come from
// page pools through the page table (fmha/paged_kv.h); everything else is unchanged.
#pragma once

#include "fmha/dropout.h"
#include "fmha/fwd_params.h"
#include "fmha/fwd_traits.h"
#include "fmha/logits.h"
#include "fmha/mask.h"
#include "fmha/paged_kv.h"
#include "fmha/seq_info.h"
#include "fmha/smem_tile.h"
#include "fmha/splitkv.h"
#include "tile/cp_async.h"
#include "tile/fast_math.h"
#include "tile/ldmatrix.h"
#include "tile/mma.h"
#include "tile/numeric_types.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

TILEFMHA_DEVICE float negative_infinity() {
  return tile::bits_as_float(0xFF800000u);
}

// The key blocks one CTA of a split-KV kernel visits: the mask's sink blocks and window blocks,
// each clipped to the split's keys. Both stay ascending and disjoint, so the main loop walks
// them as it walks KeyBlocks.
struct SplitKeyBlocks {
  int head_begin, head_count;  // sink blocks inside the split
  int tail_begin, tail_count;  // window blocks inside the split

  TILEFMHA_DEVICE int count() const { return head_count + tail_count; }
  TILEFMHA_DEVICE int block(int step) const {
    return step < head_count ? head_begin + step : tail_begin + (step - head_count);
  }

  TILEFMHA_DEVICE static void clip(int begin, int end, int first, int last, int& out_begin,
                                   int& out_count) {
    out_begin = begin > first ? begin : first;
    const int out_end = end < last ? end : last;
    out_count = out_end > out_begin ? out_end - out_begin : 0;
  }

  TILEFMHA_DEVICE static SplitKeyBlocks make(const KeyBlocks& mask, int len_k, int num_splits,
                                             int split, int block_n) {
    const SplitKeyRange keys = split_key_range(len_k, num_splits, split);
    // A split past the last key is empty; rounding its end up would give it a ragged block.
    const int first = keys.begin / block_n;
    const int last = keys.end > keys.begin ? ceil_div(keys.end, block_n) : first;
    SplitKeyBlocks blocks;
    clip(0, mask.sink_blocks, first, last, blocks.head_begin, blocks.head_count);
    clip(mask.window_begin, mask.window_end, first, last, blocks.tail_begin, blocks.tail_count);
    return blocks;
  }
};

template <class Traits, class Mask>
TILEFMHA_DEVICE auto visited_key_blocks(const Mask& mask, const FwdParams& p, const SeqInfo& seq,
                                        int split) {
  if constexpr (Traits::kSplitKv) {
    return SplitKeyBlocks::make(mask.key_blocks(Traits::kBlockN), seq.len_k, p.num_splits, split,
                                Traits::kBlockN);
  } else {
    return mask.key_blocks(Traits::kBlockN);
  }
}

// Split-KV epilogue: the split's normalized O goes straight from the accumulators to the fp32
// partial (a quad covers 8 contiguous floats of a row: whole 32-byte sectors, no shared-memory
// pass) and its LSE to lse_acc. Rows past the sequence end are left alone.
template <class Traits>
TILEFMHA_DEVICE void store_split_partials(const FwdParams& p, const SeqInfo& seq, int h, int split,
                                          int m_begin, int warp_row, int group, int pair,
                                          const float (&o)[Traits::kMTiles][Traits::kDv / 8][4],
                                          const float (&lse)[Traits::kMTiles][2]) {
  float* o_acc = p.o_acc + split * p.o_acc_split_stride + seq.view_batch * p.o_acc_batch_stride +
                 h * p.o_acc_head_stride;
  float* lse_acc = p.lse_acc + split * p.lse_acc_split_stride +
                   seq.view_batch * p.lse_acc_batch_stride + h * p.lse_acc_head_stride;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = m_begin + warp_row + mt * 16 + group + r * 8;
      if (i >= seq.len_q) continue;
      float* row = o_acc + (seq.q_start + i) * p.o_acc_seq_stride;
#pragma unroll
      for (int dt = 0; dt < Traits::kDv / 8; ++dt) {
        const int col = dt * 8 + pair * 2;
        if (!Traits::kPadHdimV || col < p.hdim_v) {
          *reinterpret_cast<float2*>(row + col) =
              make_float2(o[mt][dt][2 * r], o[mt][dt][2 * r + 1]);
        }
      }
      if (pair == 0) lse_acc[(seq.q_start + i) * p.lse_acc_seq_stride] = lse[mt][r];
    }
  }
}

template <class Traits>
TILEFMHA_DEVICE void fwd_sm80(const FwdParams& p) {
  using T = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  constexpr int kStages = Traits::kStages;
  constexpr int kMTiles = Traits::kMTiles;
  constexpr int kNTiles = kBlockN / 8;       // 8-key accumulator tiles of S
  constexpr int kDvTiles = Traits::kDv / 8;  // 8-column accumulator tiles of O
  constexpr int kQSteps = Traits::kDq / 16;  // k16 steps of Q K^T
  constexpr int kKeySteps = kBlockN / 16;    // k16 steps of P V
  using QTile = SwizzledTile<kBlockM, Traits::kDq>;
  using KTile = SwizzledTile<kBlockN, Traits::kDq>;
  using VTile = SwizzledTile<kBlockN, Traits::kDv>;
  using OTile = SwizzledTile<kBlockM, Traits::kDv>;

  extern __shared__ __align__(128) unsigned char shared[];
  const u32 smem_q = tile::shared_address(shared);
  const u32 smem_k = smem_q + QTile::kBytes;
  const u32 smem_v = smem_k + kStages * KTile::kBytes;

  // Later query blocks see more keys under causal masks: schedule them first.
  const int m_begin = (gridDim.x - 1 - blockIdx.x) * kBlockM;
  const int h = blockIdx.y;
  const int b = Traits::kSplitKv ? int(blockIdx.z) / p.num_splits : int(blockIdx.z);
  const int split = Traits::kSplitKv ? int(blockIdx.z) - b * p.num_splits : 0;
  const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, b);
  if (m_begin >= seq.len_q) return;

  const int thread = threadIdx.x;
  const int warp = thread >> 5;
  const int lane = thread & 31;
  const int group = lane >> 2;  // accumulator row within an 8-row half
  const int pair = lane & 3;    // accumulator column pair
  const int warp_row = warp * kMTiles * 16;
  // ldmatrix x4 lanes: lane / 8 picks the 8x8 matrix of a 16x16 operand. A operands (Q, and V
  // read transposed) take matrices in the order rows +0, rows +8, cols +8, both +8; K (the B
  // operand of two 8-key tiles) in the order cols +0, cols +8, rows +8, both +8.
  const int lane_row = lane & 7;
  const auto q_lane = QTile::lane_offsets(((lane >> 3) & 1) * 8 + lane_row, (lane >> 4) * 8);
  const auto k_lane = KTile::lane_offsets((lane >> 4) * 8 + lane_row, ((lane >> 3) & 1) * 8);
  const auto v_lane = VTile::lane_offsets(((lane >> 3) & 1) * 8 + lane_row, (lane >> 4) * 8);

  const SeqInfo::Operands<T> operands = seq.operands<T>(p, h, m_begin);
  const T* q = operands.q;
  const T* k = operands.k;
  const T* v = operands.v;

  const typename Traits::Mask mask(p, seq, m_begin, kBlockM);
  const auto blocks = visited_key_blocks<Traits>(mask, p, seq, split);
  const int steps = blocks.count();
  const typename Traits::Logits logits(p, seq, b, h);
  const typename Traits::Dropout dropout(p, b, h);

  auto load_kv = [&](int step, int slot) {
    const int key_begin = blocks.block(step) * kBlockN;
    if constexpr (Traits::kPaged) {
      // Page pools: the heads' rows start at the pool, pages and slots come from the table.
      const long long kv_head = h / p.head_group;
      const PagedKeys keys = PagedKeys::make(p, b);
      load_paged_tile_async<KTile, kThreads, Traits::kPadHdimQ>(
          smem_k + slot * KTile::kBytes, static_cast<const T*>(p.k) + kv_head * p.k_strides.head,
          p.k_strides, keys, key_begin, seq.len_k - key_begin, int(p.hdim_q), thread);
      load_paged_tile_async<VTile, kThreads, Traits::kPadHdimV>(
          smem_v + slot * VTile::kBytes, static_cast<const T*>(p.v) + kv_head * p.v_strides.head,
          p.v_strides, keys, key_begin, seq.len_k - key_begin, int(p.hdim_v), thread);
    } else {
      load_tile_async<KTile, kThreads, Traits::kPadSeqlenK, Traits::kPadHdimQ>(
          smem_k + slot * KTile::kBytes, k + key_begin * p.k_strides.seq, p.k_strides.seq,
          seq.len_k - key_begin, int(p.hdim_q), thread);
      load_tile_async<VTile, kThreads, Traits::kPadSeqlenK, Traits::kPadHdimV>(
          smem_v + slot * VTile::kBytes, v + key_begin * p.v_strides.seq, p.v_strides.seq,
          seq.len_k - key_begin, int(p.hdim_v), thread);
    }
  };

  // Prologue: Q joins the first group; kStages - 1 key blocks in flight.
  load_tile_async<QTile, kThreads, Traits::kPadSeqlenQ, Traits::kPadHdimQ>(
      smem_q, q, p.q_strides.seq, seq.len_q - m_begin, int(p.hdim_q), thread);
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < steps) load_kv(stage, stage);
    tile::cp_async_commit_group();
  }

  float o[kMTiles][kDvTiles][4];
  float row_max[kMTiles][2];  // base-2 running max of rows group and group + 8
  float row_sum[kMTiles][2];  // this thread's partial sums; quad-reduced in the epilogue
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDvTiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[mt][r] = negative_infinity();
      row_sum[mt][r] = 0.0f;
    }
  }

  constexpr int kQRegTiles = Traits::kQInRegisters ? kMTiles : 1;
  constexpr int kQRegSteps = Traits::kQInRegisters ? kQSteps : 1;
  u32 q_frag[kQRegTiles][kQRegSteps][4];
  auto load_q_fragment = [&](int mt, int kq, u32(&a)[4]) {
    tile::ldmatrix_x4(QTile::operand(smem_q, q_lane, warp_row + mt * 16, kq * 16), a);
  };

  for (int step = 0; step < steps; ++step) {
    tile::cp_async_wait_group<kStages - 2>();
    __syncthreads();  // block `step` visible to all; slot of block step - 1 free again
    if constexpr (Traits::kQInRegisters) {
      if (step == 0) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int kq = 0; kq < kQSteps; ++kq) load_q_fragment(mt, kq, q_frag[mt][kq]);
        }
      }
    }
    {
      const int next = step + kStages - 1;
      if (next < steps) load_kv(next, next % kStages);
      tile::cp_async_commit_group();
    }
    const int slot = step % kStages;
    const u32 k_slot = smem_k + slot * KTile::kBytes;
    const u32 v_slot = smem_v + slot * VTile::kBytes;

    // S = Q K^T
    float s[kMTiles][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
      }
    }
#pragma unroll
    for (int kq = 0; kq < kQSteps; ++kq) {
      u32 a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (Traits::kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][kq][e];
        } else {
          load_q_fragment(mt, kq, a[mt]);
        }
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        u32 kb[4];
        tile::ldmatrix_x4(KTile::operand(k_slot, k_lane, np * 16, kq * 16), kb);
        const u32 b0[2] = {kb[0], kb[1]};
        const u32 b1[2] = {kb[2], kb[3]};
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          tile::mma_m16n8k16<T>(s[mt][2 * np], a[mt], b0);
          tile::mma_m16n8k16<T>(s[mt][2 * np + 1], a[mt], b1);
        }
      }
    }

    // Logits (base 2), then the mask on boundary blocks.
    const int key_begin = blocks.block(step) * kBlockN;
    const bool boundary = mask.block_needs_mask(key_begin, kBlockN);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = m_begin + warp_row + mt * 16 + group + (e >> 1) * 8;
          const int j = key_begin + nt * 8 + pair * 2 + (e & 1);
          s[mt][nt][e] = logits(s[mt][nt][e], i, j);
        }
      }
    }
    if (boundary) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = m_begin + warp_row + mt * 16 + group + (e >> 1) * 8;
            const int j = key_begin + nt * 8 + pair * 2 + (e & 1);
            s[mt][nt][e] = mask.visible(i, j) ? s[mt][nt][e] : negative_infinity();
          }
        }
      }
    }

    // Online softmax: new running max, rescale what was accumulated, numerators in place.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float block_max = row_max[mt][r];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          block_max =
              tile::max_f32(block_max, tile::max_f32(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        }
        block_max = tile::quad_max(block_max);
        // A row with nothing visible yet keeps max -inf; subtracting 0 keeps exp2 at 0, not NaN.
        const float base = block_max == negative_infinity() ? 0.0f : block_max;
        const float correction = tile::exp2_approx(row_max[mt][r] - base);
        row_max[mt][r] = block_max;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[mt][nt][e] = tile::exp2_approx(s[mt][nt][e] - base);
            sum += s[mt][nt][e];
          }
        }
        row_sum[mt][r] = row_sum[mt][r] * correction + sum;
#pragma unroll
        for (int dt = 0; dt < kDvTiles; ++dt) {
          o[mt][dt][2 * r] *= correction;
          o[mt][dt][2 * r + 1] *= correction;
        }
      }
    }

    if constexpr (Traits::Dropout::kEnabled) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int i = m_begin + warp_row + mt * 16 + group + r * 8;
            const int j = key_begin + nt * 8 + pair * 2;
            dropout.apply_pair(s[mt][nt][2 * r], s[mt][nt][2 * r + 1], i, j);
          }
        }
      }
    }

    // O += P V: the S accumulators of two key tiles form one A operand.
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      u32 a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        a[mt][0] = tile::pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = tile::pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = tile::pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = tile::pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < kDvTiles / 2; ++np) {
        u32 vb[4];
        tile::ldmatrix_x4_trans(VTile::operand(v_slot, v_lane, kk * 16, np * 16), vb);
        const u32 b0[2] = {vb[0], vb[1]};
        const u32 b1[2] = {vb[2], vb[3]};
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          tile::mma_m16n8k16<T>(o[mt][2 * np], a[mt], b0);
          tile::mma_m16n8k16<T>(o[mt][2 * np + 1], a[mt], b1);
        }
      }
    }
  }

  // Epilogue. Every copy (Q's too, when no key block was visited) must land before the O tile
  // reuses shared memory.
  tile::cp_async_wait_group<0>();
  __syncthreads();

  float lse[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = tile::quad_sum(row_sum[mt][r]);
      float max2 = row_max[mt][r];
      float weight = 1.0f;  // share of the keys once the sink logit joins the denominator
      if constexpr (Traits::kSinkLogit) {
        const float sink2 = p.sink_logits[h * p.sink_stride] * kLog2e;
        const float joint = tile::max_f32(max2, sink2);
        weight = tile::exp2_approx(max2 - joint);
        total = total * weight + tile::exp2_approx(sink2 - joint);
        max2 = joint;
      }
      // A NaN total (a NaN among the logits this row read) counts as "any", so that it
      // reaches O and LSE; only a row that saw no key (total 0) writes O = 0 and LSE = -inf.
      const bool any = !(total <= 0.0f);
      const float factor = any ? dropout.keep_scale() * weight / total : 0.0f;
      lse[mt][r] = any ? (max2 + tile::log2_approx(total)) * kLn2 : negative_infinity();
#pragma unroll
      for (int dt = 0; dt < kDvTiles; ++dt) {
        o[mt][dt][2 * r] *= factor;
        o[mt][dt][2 * r + 1] *= factor;
      }
    }
  }

  if constexpr (Traits::kSplitKv) {
    store_split_partials<Traits>(p, seq, h, split, m_begin, warp_row, group, pair, o, lse);
    return;
  }

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDvTiles; ++dt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = warp_row + mt * 16 + group + r * 8;
        *reinterpret_cast<u32*>(shared + OTile::offset(row, dt * 8 + pair * 2)) =
            tile::pack2<T>(o[mt][dt][2 * r], o[mt][dt][2 * r + 1]);
      }
    }
  }
  __syncthreads();
  T* out = static_cast<T*>(p.o) + seq.view_batch * p.o_strides.batch +
           (seq.q_start + m_begin) * p.o_strides.seq + h * p.o_strides.head;
  store_tile<OTile, kThreads>(shared, out, p.o_strides.seq, seq.len_q - m_begin, int(p.hdim_v),
                              thread);

  if constexpr (Traits::kStoreLse) {
    if (pair == 0) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int i = m_begin + warp_row + mt * 16 + group + r * 8;
          if (i < seq.len_q) {
            p.lse[seq.view_batch * p.lse_batch_stride + h * p.lse_head_stride +
                  (seq.q_start + i) * p.lse_seq_stride] = lse[mt][r];
          }
        }
      }
    }
  }
}

}  // namespace tilefmha::fmha
