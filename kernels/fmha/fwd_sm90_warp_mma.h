// One warp's share of a decode key block on m16n8k16 mma.sync (fwd_sm90_warp_decode.h runs the
// tile): warp w of the consumer warpgroup takes keys 32w..32w+31 of every 128-key block for the
// tile's query rows 0-15. Q's fragments come from the Q tile once, K's by ldmatrix and V's by
// ldmatrix.trans, all straight from the 128B-swizzled stages the TMA loads write (K and V
// through Sm90KvStageLayout, so the paged 8-row-group layout works alike). The accumulators keep
// the wgmma order: element e of row r of 8-column chunk j at [4j + 2r + e], rows lane / 4 and
// lane / 4 + 8. Kept apart from the tile's pipeline so that the host emulation of the fragment
// shims (tests/warp_mma_emulated_test.cpp) runs it.
#pragma once

#include "fmha/fwd_sm90_kv_layout.h"
#include "fmha/fwd_sm90_shape.h"
#include "tile/fast_math.h"
#include "tile/ldmatrix.h"
#include "tile/mma.h"
#include "tile/numeric_types.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

// The factors that merge the four warps' online-softmax states of one row (raw running maxima
// `max`, folded softmax scale `scale`): warp w's sum and O count with factor[w] =
// exp2(max[w] * scale - joint * scale). Returns the joint maximum. A warp that saw no key of the
// row (max -inf) gets factor 0, and a row no warp saw keeps max -inf with every factor 0, never
// NaN; a NaN maximum reaches the factors, so that NaN logits reach O and LSE.
TILEFMHA_DEVICE float sm90_warp_merge_factors(const float (&max)[4], float scale,
                                              float (&factor)[4]) {
  const float joint = tile::max_f32(tile::max_f32(max[0], max[1]), tile::max_f32(max[2], max[3]));
  const float base = joint == tile::bits_as_float(0xFF800000u) ? 0.0f : joint * scale;
#pragma unroll
  for (int w = 0; w < 4; ++w) factor[w] = tile::exp2_approx(max[w] * scale - base);
  return joint;
}

template <class Traits>
struct Sm90WarpMma {
  using T = typename Traits::Element;
  static constexpr int kWarpKeys = Traits::kBlockN / 4;  // keys of a block per warp
  static constexpr int kQSteps = Traits::kHdimQ / 16;    // k16 slices of S = Q K^T
  static constexpr int kKeySteps = kWarpKeys / 16;       // k16 slices of O += P V
  static constexpr int kVTilePairs = Traits::kHdimV / 16;
  static constexpr int kKPanels = Traits::kHdimQ / Traits::kPanelElements;
  static constexpr int kVPanels = Traits::kHdimV / Traits::kPanelElements;
  static_assert(kQSteps * 16 == Traits::kHdimQ && kVTilePairs * 16 == Traits::kHdimV,
                "head dims in whole k16 slices");

  int warp;  // 0-3 within the consumer warpgroup
  int lane;
  Sm90KvStageLayout<Traits> kv_layout;

  // The 16-byte chunk of a 128B-swizzled row holding column `column`: 8-column chunks trade
  // places within their 128-byte panel row by the row's index in its 8-row atom.
  TILEFMHA_DEVICE static tile::u32 swizzled(tile::u32 row_base, tile::u32 panel_bytes, int row,
                                            int column) {
    const int panel = column / Traits::kPanelElements;
    const int chunk = (column % Traits::kPanelElements) / 8;
    return row_base + tile::u32(panel) * panel_bytes + tile::u32((chunk ^ (row & 7)) * 16);
  }

  // Rows 0-15 of the Q tile at `q_tile` as A fragments, one per k16 slice.
  TILEFMHA_DEVICE void load_q(tile::u32 q_tile, tile::u32 (&q)[kQSteps][4]) const {
    const int row = (lane & 7) + ((lane >> 3) & 1) * 8;
    const tile::u32 row_base = q_tile + tile::u32(row) * kSm90RowBytes;
#pragma unroll
    for (int step = 0; step < kQSteps; ++step) {
      const int column = 16 * step + 8 * (lane >> 4);
      tile::ldmatrix_x4(swizzled(row_base, Traits::kQPanelBytes, row, column), q[step]);
    }
  }

  // S = Q K^T over this warp's 32 keys of the K stage at `k_stage`: four 8-key tiles.
  TILEFMHA_DEVICE void qk(float (&s)[kWarpKeys / 2], const tile::u32 (&q)[kQSteps][4],
                          tile::u32 k_stage) const {
#pragma unroll
    for (int i = 0; i < kWarpKeys / 2; ++i) s[i] = 0.0f;
#pragma unroll
    for (int pair = 0; pair < kWarpKeys / 16; ++pair) {
      // ldmatrix tiles: keys 0-7 (dims +0, +8), then keys 8-15 (dims +0, +8) of the pair.
      const int key = kWarpKeys * warp + 16 * pair + (lane & 7) + 8 * (lane >> 4);
      const tile::u32 row_base = k_stage + kv_layout.template row_offset<kKPanels>(key);
#pragma unroll
      for (int step = 0; step < kQSteps; ++step) {
        const int column = 16 * step + 8 * ((lane >> 3) & 1);
        tile::u32 b[4];
        tile::ldmatrix_x4(swizzled(row_base, kv_layout.panel_bytes(), key, column), b);
        const tile::u32 low[2] = {b[0], b[1]};
        const tile::u32 high[2] = {b[2], b[3]};
        tile::mma_m16n8k16<T>(*reinterpret_cast<float(*)[4]>(&s[8 * pair]), q[step], low);
        tile::mma_m16n8k16<T>(*reinterpret_cast<float(*)[4]>(&s[8 * pair + 4]), q[step], high);
      }
    }
  }

  // Keys at or past the sequence's end score -inf (the block may end past it).
  TILEFMHA_DEVICE void mask_end(float (&s)[kWarpKeys / 2], int key_begin, int len_k) const {
    const int limit = len_k - 1 - key_begin - kWarpKeys * warp - 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kWarpKeys / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int offset = 8 * j + i % 2;
        s[4 * j + i] = offset <= limit ? s[4 * j + i] : tile::bits_as_float(0xFF800000u);
      }
    }
  }

  // P (unnormalized probabilities in S's registers) as the A fragments of P V: the k16 slice
  // `step` covers S tiles 2 step and 2 step + 1, in the order mma.sync's A takes them.
  TILEFMHA_DEVICE static void pack_p(const float (&s)[kWarpKeys / 2],
                                     tile::u32 (&p)[kKeySteps][4]) {
#pragma unroll
    for (int step = 0; step < kKeySteps; ++step) {
#pragma unroll
      for (int r = 0; r < 4; ++r)
        p[step][r] = tile::pack2<T>(s[8 * step + 2 * r], s[8 * step + 2 * r + 1]);
    }
  }

  // O += P V over this warp's 32 keys of the V stage at `v_stage`.
  TILEFMHA_DEVICE void pv(float (&o)[Traits::kHdimV / 2], const tile::u32 (&p)[kKeySteps][4],
                          tile::u32 v_stage) const {
#pragma unroll
    for (int step = 0; step < kKeySteps; ++step) {
      // ldmatrix.trans tiles: keys 0-7 then 8-15 of the slice (dims +0), then the same (dims +8).
      const int key = kWarpKeys * warp + 16 * step + (lane & 7) + 8 * ((lane >> 3) & 1);
      const tile::u32 row_base = v_stage + kv_layout.template row_offset<kVPanels>(key);
#pragma unroll
      for (int pair = 0; pair < kVTilePairs; ++pair) {
        const int column = 16 * pair + 8 * (lane >> 4);
        tile::u32 b[4];
        tile::ldmatrix_x4_trans(swizzled(row_base, kv_layout.panel_bytes(), key, column), b);
        const tile::u32 low[2] = {b[0], b[1]};
        const tile::u32 high[2] = {b[2], b[3]};
        tile::mma_m16n8k16<T>(*reinterpret_cast<float(*)[4]>(&o[8 * pair]), p[step], low);
        tile::mma_m16n8k16<T>(*reinterpret_cast<float(*)[4]>(&o[8 * pair + 4]), p[step], high);
      }
    }
  }
};

}  // namespace tilefmha::fmha
