// The portable backward kernel (bwd_dq_dk_dv, sm_80+), one CTA per (key block of block_n keys,
// KV head, sequence). Each warp owns 16 keys of the block, so dK and dV of those keys stay in
// its registers for the whole CTA, summed over every query head of the KV head's GQA group and
// every query block the mask lets see the keys; they are written once, without atomics. Head
// dims past 128 split dK and dV by columns over several warps per 16 keys (fmha/bwd_sm80_shape.h).
//
// Per (query head, query block): Q, dO, LSE and D are staged in shared memory, then on
// mma.sync m16n8k16
//   S^T = K Q^T,  P^T = exp(S^T - LSE),  dP^T = V dO^T,  dS^T = P^T (dP^T - D) * ds/d(dot),
//   dV += P^T dO,  dK += dS^T Q   (P^T and dS^T re-packed from the accumulators as A operands),
// and dS^T goes through shared memory so that all warps together compute dQ = dS K for the
// query block, which is added to the fp32 accumulator (atomics; in deterministic mode a plain
// store into the key block's own slice). Visibility is the forward's mask hook (fmha/mask.h),
// the bias or ALiBi the forward's logits hook (fmha/logits.h); dropout is replayed from the
// forward's Philox stream and dBias = dS written out (fmha/bwd_sm80_logits.h).
#pragma once

#include "fmha/bwd_params.h"
#include "fmha/bwd_row_stats.h"
#include "fmha/bwd_shape.h"
#include "fmha/bwd_sm80_logits.h"
#include "fmha/bwd_sm80_shape.h"
#include "fmha/logits.h"
#include "fmha/mask.h"
#include "fmha/seq_info.h"
#include "fmha/smem_tile.h"
#include "tile/cp_async.h"
#include "tile/fast_math.h"
#include "tile/ldmatrix.h"
#include "tile/mma.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

template <class Element_, int HdimQ, int HdimV, int BlockM, int BlockN, int Warps, bool GroupMode,
          bool PadHdimQ, bool PadHdimV, class Mask_, bool SoftCap_, bool Deterministic,
          class Bias_ = NoBias, class Dropout_ = BwdNoDropout, class DBias_ = NoDBias>
struct BwdTraits {
  using Element = Element_;
  using Mask = Mask_;
  using Bias = Bias_;        // NoBias, AlibiBias or ElementwiseBias (fmha/logits.h)
  using Dropout = Dropout_;  // BwdNoDropout or BwdPhiloxDropout
  using DBias = DBias_;      // NoDBias or BwdDBias
  static constexpr int kDq = padded_head_dim(HdimQ);
  static constexpr int kDv = padded_head_dim(HdimV);
  static constexpr int kBlockM = BlockM;
  static constexpr int kBlockN = BlockN;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
  static constexpr bool kGroupMode = GroupMode;
  static constexpr bool kPadHdimQ = PadHdimQ || kDq != HdimQ;
  static constexpr bool kPadHdimV = PadHdimV || kDv != HdimV;
  static constexpr bool kSoftCap = SoftCap_;
  static constexpr bool kDeterministic = Deterministic;
  static constexpr int kSharedBytes =
      bwd_sm80_shared_bytes(HdimQ, HdimV, BlockM, BlockN, int(sizeof(Element)));
  // Column parts of dK and dV (1 up to 128 columns), each held by its own warps.
  static constexpr int kParts = bwd_sm80_column_parts(HdimQ, HdimV);
  static constexpr int kPartQ = kDq / kParts;  // dK columns of one warp
  static constexpr int kPartV = kDv / kParts;  // dV columns of one warp
  static constexpr int kKeyWarps = BlockN / 16;

  static_assert(tile::same_type<Element, tile::half_t>::value ||
                    tile::same_type<Element, tile::bfloat16_t>::value,
                "sm80_mma computes on fp16 or bf16");
  static_assert(Warps == kParts * kKeyWarps && BlockN % 16 == 0,
                "each warp owns 16 keys of the block and one column part");
  static_assert(kPartQ % 16 == 0 && kPartV % 16 == 0 && kPartQ <= kBwdSm80PartColumns &&
                    kPartV <= kBwdSm80PartColumns,
                "column parts are whole 16-column mma operands of at most 128 columns");
  static_assert(BlockM % 32 == 0, "dS^T tiles are built from 32-query panels");
};

template <class Traits>
TILEFMHA_DEVICE void bwd_sm80(const BwdParams& bp) {
  using T = typename Traits::Element;
  using Mask = typename Traits::Mask;
  using Bias = typename Traits::Bias;
  using Dropout = typename Traits::Dropout;
  using DBias = typename Traits::DBias;
  const FwdParams& p = bp.fwd;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kThreads = Traits::kThreads;
  // Queries per register pass of S^T and dP^T (kChunk / 8 accumulator tiles each).
  constexpr int kChunk = 32;
  constexpr int kChunkTiles = kChunk / 8;
  constexpr int kDqTiles = Traits::kPartQ / 8;  // 8-column accumulator tiles of the warp's dK
  constexpr int kDvTiles = Traits::kPartV / 8;  // 8-column accumulator tiles of the warp's dV
  constexpr int kQSteps = Traits::kDq / 16;     // k16 steps of K Q^T
  constexpr int kVSteps = Traits::kDv / 16;     // k16 steps of V dO^T
  constexpr int kKeySteps = kBlockN / 16;       // k16 steps of dS K
  constexpr int kDqPieces = (kBlockM / 16) * (Traits::kDq / 32);  // 16 x 32 pieces of dQ
  using KTile = SwizzledTile<kBlockN, Traits::kDq>;
  using VTile = SwizzledTile<kBlockN, Traits::kDv>;
  using QTile = SwizzledTile<kBlockM, Traits::kDq>;
  using DoTile = SwizzledTile<kBlockM, Traits::kDv>;
  using DsTile = SwizzledTile<kBlockN, kBlockM>;

  extern __shared__ __align__(128) unsigned char shared[];
  const u32 smem_k = tile::shared_address(shared);
  const u32 smem_v = smem_k + KTile::kBytes;
  const u32 smem_q = smem_v + VTile::kBytes;
  const u32 smem_do = smem_q + QTile::kBytes;
  const u32 smem_ds = smem_do + DoTile::kBytes;
  unsigned char* const ds_bytes = shared + (smem_ds - smem_k);
  float* const lse2_rows = reinterpret_cast<float*>(ds_bytes + DsTile::kBytes);
  float* const d_rows = lse2_rows + kBlockM;

  const int n_block = blockIdx.x;
  const int hk = blockIdx.y;
  const int b = blockIdx.z;
  const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, b);
  const int key_begin = n_block * kBlockN;
  // Batch mode writes dK/dV rows up to seqlen_k (zeros past a shorter per-sequence key count),
  // as the reference does; group mode writes the sequence's keys only.
  const int rows_written =
      Traits::kGroupMode ? seq.len_k : (int(p.seqlen_k) > seq.len_k ? int(p.seqlen_k) : seq.len_k);
  // The group's dBias columns of this key block, all rows (the view's extents): a block past
  // the sequence's keys still owns its zeros.
  const int dbias_key_end =
      key_begin + kBlockN < int(p.seqlen_k) ? key_begin + kBlockN : int(p.seqlen_k);
  if (key_begin >= rows_written) {
    if constexpr (DBias::kEnabled) {
      for (int h = hk * int(p.head_group); h < (hk + 1) * int(p.head_group); ++h)
        DBias(bp, seq, b, h)
            .zero(0, int(p.seqlen_q), key_begin, dbias_key_end, threadIdx.x, Traits::kThreads);
    }
    return;
  }

  const int thread = threadIdx.x;
  const int warp = thread >> 5;
  const int lane = thread & 31;
  const int group = lane >> 2;
  const int pair = lane & 3;
  const int lane_row = lane & 7;
  // ldmatrix x4 lane offsets (the same for every tile: a panel row is 64 bytes whatever the
  // tile). `rows_first`: matrices ordered rows +0, rows +8, cols +8, both +8 (A operands, and
  // B operands read transposed from [k][n] tiles). `cols_first`: cols +0, cols +8, rows +8,
  // both +8 (B operands of two n tiles from [n][k] tiles, and A read transposed from [k][m]).
  const auto rows_first = KTile::lane_offsets(((lane >> 3) & 1) * 8 + lane_row, (lane >> 4) * 8);
  const auto cols_first = KTile::lane_offsets((lane >> 4) * 8 + lane_row, ((lane >> 3) & 1) * 8);
  // The warp's 16 keys and its column part of dK and dV (part 0 of 1 up to 128 columns: the
  // split compiles away).
  const int key_warp = Traits::kParts == 1 ? warp : warp % Traits::kKeyWarps;
  const int part = Traits::kParts == 1 ? 0 : warp / Traits::kKeyWarps;
  const int warp_key = key_warp * 16;  // the warp's first key row in the block
  const int q_col0 = part * Traits::kPartQ;
  const int v_col0 = part * Traits::kPartV;

  const SeqInfo::Operands<T> kv = seq.operands<T>(p, hk * int(p.head_group), 0);
  load_tile_async<KTile, kThreads, true, Traits::kPadHdimQ>(
      smem_k, kv.k + key_begin * p.k_strides.seq, p.k_strides.seq, seq.len_k - key_begin,
      int(p.hdim_q), thread);
  load_tile_async<VTile, kThreads, true, Traits::kPadHdimV>(
      smem_v, kv.v + key_begin * p.v_strides.seq, p.v_strides.seq, seq.len_k - key_begin,
      int(p.hdim_v), thread);
  tile::cp_async_commit_group();

  float dk[kDqTiles][4];
  float dv[kDvTiles][4];
#pragma unroll
  for (int t = 0; t < kDqTiles; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[t][e] = 0.0f;
  }
#pragma unroll
  for (int t = 0; t < kDvTiles; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[t][e] = 0.0f;
  }

  const BwdLogit<Traits::kSoftCap> logit(p);
  const int query_blocks = ceil_div(seq.len_q, kBlockM);
  const int head_end = (hk + 1) * int(p.head_group);
  for (int h = hk * int(p.head_group); h < head_end; ++h) {
    const SeqInfo::Operands<T> ops = seq.operands<T>(p, h, 0);
    const Bias bias(p, seq, b, h);
    const Dropout dropout(p, b, h);
    const DBias dbias(bp, seq, b, h);
    const T* d_o_head = static_cast<const T*>(bp.d_o) + seq.view_batch * bp.d_o_strides.batch +
                        seq.q_start * bp.d_o_strides.seq + h * bp.d_o_strides.head;
    const long long lse_head = seq.view_batch * p.lse_batch_stride + h * p.lse_head_stride;
    const long long d_head = seq.view_batch * bp.d_batch_stride + h * bp.d_head_stride;
    float* dq_head = bp.dq_acc + seq.view_batch * bp.dq_acc_strides.batch +
                     seq.q_start * bp.dq_acc_strides.seq + h * bp.dq_acc_strides.head +
                     (Traits::kDeterministic ? n_block * bp.dq_acc_slice_stride : 0);

    for (int m_block = 0; m_block < query_blocks; ++m_block) {
      const int m_begin = m_block * kBlockM;
      const Mask mask(p, seq, m_begin, kBlockM);
      const KeyBlocks visits = mask.key_blocks(kBlockN);
      if (!(n_block < visits.sink_blocks ||
            (n_block >= visits.window_begin && n_block < visits.window_end))) {
        const int m_end = m_begin + kBlockM < seq.len_q ? m_begin + kBlockM : seq.len_q;
        dbias.zero(m_begin, m_end, key_begin, dbias_key_end, thread, kThreads);
        continue;
      }
      const bool boundary = mask.block_needs_mask(key_begin, kBlockN);

      __syncthreads();  // the previous query block is done with Q, dO, dS^T, LSE and D
      load_tile_async<QTile, kThreads, true, Traits::kPadHdimQ>(
          smem_q, ops.q + m_begin * p.q_strides.seq, p.q_strides.seq, seq.len_q - m_begin,
          int(p.hdim_q), thread);
      load_tile_async<DoTile, kThreads, true, Traits::kPadHdimV>(
          smem_do, d_o_head + m_begin * bp.d_o_strides.seq, bp.d_o_strides.seq, seq.len_q - m_begin,
          int(p.hdim_v), thread);
      tile::cp_async_commit_group();
      for (int r = thread; r < kBlockM; r += kThreads) {
        const BwdRowStats stats = BwdRowStats::of(bp, seq, lse_head, d_head, m_begin + r);
        lse2_rows[r] = stats.lse2;
        d_rows[r] = stats.d;
      }
      tile::cp_async_wait_group<0>();
      __syncthreads();

      // Query chunks of kChunk: S^T and dP^T of one chunk live in registers beside dK and dV.
#pragma unroll 1
      for (int chunk = 0; chunk < kBlockM / kChunk; ++chunk) {
        const int chunk_begin = chunk * kChunk;
        // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys x the chunk's queries.
        float st[kChunkTiles][4];
        float dpt[kChunkTiles][4];
#pragma unroll
        for (int t = 0; t < kChunkTiles; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            st[t][e] = 0.0f;
            dpt[t][e] = 0.0f;
          }
        }
#pragma unroll
        for (int kq = 0; kq < kQSteps; ++kq) {
          u32 a[4];
          tile::ldmatrix_x4(KTile::operand(smem_k, rows_first, warp_key, kq * 16), a);
#pragma unroll
          for (int np = 0; np < kChunkTiles / 2; ++np) {
            u32 qb[4];
            tile::ldmatrix_x4(QTile::operand(smem_q, cols_first, chunk_begin + np * 16, kq * 16),
                              qb);
            const u32 b0[2] = {qb[0], qb[1]};
            const u32 b1[2] = {qb[2], qb[3]};
            tile::mma_m16n8k16<T>(st[2 * np], a, b0);
            tile::mma_m16n8k16<T>(st[2 * np + 1], a, b1);
          }
        }
#pragma unroll
        for (int kd = 0; kd < kVSteps; ++kd) {
          u32 a[4];
          tile::ldmatrix_x4(VTile::operand(smem_v, rows_first, warp_key, kd * 16), a);
#pragma unroll
          for (int np = 0; np < kChunkTiles / 2; ++np) {
            u32 ob[4];
            tile::ldmatrix_x4(DoTile::operand(smem_do, cols_first, chunk_begin + np * 16, kd * 16),
                              ob);
            const u32 b0[2] = {ob[0], ob[1]};
            const u32 b1[2] = {ob[2], ob[3]};
            tile::mma_m16n8k16<T>(dpt[2 * np], a, b0);
            tile::mma_m16n8k16<T>(dpt[2 * np + 1], a, b1);
          }
        }

        // P^T (times the dropout factor Z) into st, dL/d(dot) into dpt; dS^T to shared memory
        // for dQ. dS = P (Z dP - D), the gradient of the logit, is dBias.
#pragma unroll
        for (int t = 0; t < kChunkTiles; ++t) {
          const int q0 = m_begin + chunk_begin + t * 8 + pair * 2;
          const int k0 = key_begin + warp_key + group;
          float z[4] = {1.0f, 1.0f, 1.0f, 1.0f};
          dropout.factors(z, q0, k0);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = q0 + (e & 1);
            const int j = k0 + (e >> 1) * 8;
            const int query = i - m_begin;
            float d_dot;
            const float s2 = bias(logit.logit2(st[t][e], d_dot), i, j);
            const bool visible = !boundary || mask.visible(i, j);
            const float prob = visible ? tile::exp2_approx(s2 - lse2_rows[query]) : 0.0f;
            const float ds = prob * (z[e] * dpt[t][e] - d_rows[query]);
            // Every column part computed the same dS: one writes dBias.
            if (DBias::kEnabled && (Traits::kParts == 1 || part == 0)) dbias.put(ds, i, j);
            st[t][e] = prob * z[e];
            dpt[t][e] = ds * d_dot;
          }
          // Every column part computed the same dS^T: one writes it.
          if (Traits::kParts == 1 || part == 0) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              *reinterpret_cast<u32*>(ds_bytes + DsTile::offset(warp_key + group + r * 8,
                                                                chunk_begin + t * 8 + pair * 2)) =
                  tile::pack2<T>(dpt[t][2 * r], dpt[t][2 * r + 1]);
            }
          }
        }

        // dV += P^T dO and dK += dS^T Q: the accumulators of two query tiles form one A
        // operand; dO and Q, stored [query][dim], are read transposed as B.
#pragma unroll
        for (int kk = 0; kk < kChunkTiles / 2; ++kk) {
          u32 pa[4], sa[4];
          pa[0] = tile::pack2<T>(st[2 * kk][0], st[2 * kk][1]);
          pa[1] = tile::pack2<T>(st[2 * kk][2], st[2 * kk][3]);
          pa[2] = tile::pack2<T>(st[2 * kk + 1][0], st[2 * kk + 1][1]);
          pa[3] = tile::pack2<T>(st[2 * kk + 1][2], st[2 * kk + 1][3]);
          sa[0] = tile::pack2<T>(dpt[2 * kk][0], dpt[2 * kk][1]);
          sa[1] = tile::pack2<T>(dpt[2 * kk][2], dpt[2 * kk][3]);
          sa[2] = tile::pack2<T>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
          sa[3] = tile::pack2<T>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
          const int row = chunk_begin + kk * 16;
#pragma unroll
          for (int np = 0; np < kDvTiles / 2; ++np) {
            u32 ob[4];
            tile::ldmatrix_x4_trans(DoTile::operand(smem_do, rows_first, row, v_col0 + np * 16),
                                    ob);
            const u32 b0[2] = {ob[0], ob[1]};
            const u32 b1[2] = {ob[2], ob[3]};
            tile::mma_m16n8k16<T>(dv[2 * np], pa, b0);
            tile::mma_m16n8k16<T>(dv[2 * np + 1], pa, b1);
          }
#pragma unroll
          for (int np = 0; np < kDqTiles / 2; ++np) {
            u32 qb[4];
            tile::ldmatrix_x4_trans(QTile::operand(smem_q, rows_first, row, q_col0 + np * 16), qb);
            const u32 b0[2] = {qb[0], qb[1]};
            const u32 b1[2] = {qb[2], qb[3]};
            tile::mma_m16n8k16<T>(dk[2 * np], sa, b0);
            tile::mma_m16n8k16<T>(dk[2 * np + 1], sa, b1);
          }
        }
      }
      __syncthreads();  // every warp's dS^T rows are in shared memory

      // dQ = dS K, in 16-query x 32-column pieces spread over the warps. dS is read transposed
      // from the dS^T tile, K transposed from its [key][dim] tile.
      for (int piece = warp; piece < kDqPieces; piece += Traits::kWarps) {
        const int mt = piece % (kBlockM / 16);
        const int chunk = piece / (kBlockM / 16);
        float acc[4][4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < kKeySteps; ++kk) {
          u32 a[4];
          tile::ldmatrix_x4_trans(DsTile::operand(smem_ds, cols_first, kk * 16, mt * 16), a);
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            u32 kb[4];
            tile::ldmatrix_x4_trans(
                KTile::operand(smem_k, rows_first, kk * 16, chunk * 32 + np * 16), kb);
            const u32 b0[2] = {kb[0], kb[1]};
            const u32 b1[2] = {kb[2], kb[3]};
            tile::mma_m16n8k16<T>(acc[2 * np], a, b0);
            tile::mma_m16n8k16<T>(acc[2 * np + 1], a, b1);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int i = m_begin + mt * 16 + group + r * 8;
          if (i >= seq.len_q) continue;
          float* row = dq_head + (long long)i * bp.dq_acc_strides.seq;
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const int col = chunk * 32 + t * 8 + pair * 2;
            if (Traits::kPadHdimQ && col >= p.hdim_q) continue;
            if constexpr (Traits::kDeterministic) {
              *reinterpret_cast<float2*>(row + col) = make_float2(acc[t][2 * r], acc[t][2 * r + 1]);
            } else {
              atomicAdd(row + col, acc[t][2 * r]);
              atomicAdd(row + col + 1, acc[t][2 * r + 1]);
            }
          }
        }
      }
    }
    // dBias rows past the sequence's queries (group mode: up to the longest).
    dbias.zero(seq.len_q, int(p.seqlen_q), key_begin, dbias_key_end, thread, kThreads);
  }

  // Epilogue: the warp's dK and dV rows in the output dtype (a quad writes 16 contiguous bytes).
  // Every key of the block was predicated, so rows past the sequence's keys hold zeros.
  tile::cp_async_wait_group<0>();
  T* dk_out = static_cast<T*>(bp.dk) + seq.view_batch * bp.dk_strides.batch +
              (seq.k_start + key_begin) * bp.dk_strides.seq + hk * bp.dk_strides.head;
  T* dv_out = static_cast<T*>(bp.dv) + seq.view_batch * bp.dv_strides.batch +
              (seq.k_start + key_begin) * bp.dv_strides.seq + hk * bp.dv_strides.head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = warp_key + group + r * 8;
    if (key_begin + key >= rows_written) continue;
#pragma unroll
    for (int t = 0; t < kDqTiles; ++t) {
      const int col = q_col0 + t * 8 + pair * 2;
      if (!Traits::kPadHdimQ || col < p.hdim_q)
        *reinterpret_cast<u32*>(dk_out + key * bp.dk_strides.seq + col) =
            tile::pack2<T>(dk[t][2 * r], dk[t][2 * r + 1]);
    }
#pragma unroll
    for (int t = 0; t < kDvTiles; ++t) {
      const int col = v_col0 + t * 8 + pair * 2;
      if (!Traits::kPadHdimV || col < p.hdim_v)
        *reinterpret_cast<u32*>(dv_out + key * bp.dv_strides.seq + col) =
            tile::pack2<T>(dv[t][2 * r], dv[t][2 * r + 1]);
    }
  }
}

}  // namespace tilefmha::fmha
