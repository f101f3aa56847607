// The sm90_ws backward's epilogue: a consumer warpgroup's dK and dV rows (split columns: its
// columns of them) in the output dtype, once per tile.
//
// A wgmma accumulator spreads each row over the four lanes of a quad, two columns a lane, so
// stores straight from registers wrote 16 bytes of each of 8 rows per warp instruction: half
// sectors, four times the instructions, and the store queue was a fifth of the consumers' time
// at 1k causal keys (docs/performance.md, v15). Instead each warp turns its 16 rows around in
// shared memory (stmatrix) and writes whole 16-byte chunks, a row's chunks from adjacent lanes.
//
// The persistent forms (short tiles, masked tiles) and deterministic mode take this path. One
// CTA per tile over long unmasked tiles keeps the direct stores (bwd_sm90): there the epilogue is
// a few percent of a tile, and this path measured 4% slower at 16k keys (hdim 128, H100, three
// rounds; docs/performance.md v15), for a reason not found. (Deterministic mode, also one CTA per
// tile, gains 4-7% at 1k keys and loses 2-3% at hdim 128 8k with it.)
//
// The scratch is the warp's own part of the dS^T buffer the CTA's next block will use: the rows
// of its keys (split columns: of its warpgroup's query columns). Nothing else reads or writes
// that part before the warp itself stores the next block's dS^T there: the buffer's previous
// block was read by dQ GEMMs that both warpgroups completed before the last block's dS barrier,
// and its next reads come after the next block's barrier, which this warp reaches only after
// its epilogue.
#pragma once

#include "fmha/bwd_sm90_shape.h"
#include "tile/ldmatrix.h"
#include "tile/numeric_types.h"
#include "tile/vector_io.h"

namespace tilefmha::fmha {

template <class Traits>
struct Sm90BwdEpilogue {
  using T = typename Traits::Element;
  static constexpr int kWarpRows = 16;  // a warp's rows of the m64 accumulator
  // 16-byte chunks of a dS^T row that a warp owns: its warpgroup's query columns, within one
  // panel.
  static constexpr int kQueryChunks =
      (Traits::kSplitColumns ? Traits::kBlockM / kSm90BwdConsumerGroups : Traits::kBlockM) / 8;
  static constexpr int kOwnedChunks = kQueryChunks < 8 ? kQueryChunks : 8;
  // A round moves kChunks column chunks of the warp's 16 rows: the most the scratch holds that
  // divides both gradients' columns.
  static constexpr int chunks_per_round(int chunks) {
    return (Traits::kGroupHdimQ / 8) % chunks == 0 && (Traits::kGroupHdimV / 8) % chunks == 0
               ? chunks
               : chunks_per_round(chunks / 2);
  }
  static constexpr int kChunks = chunks_per_round(kOwnedChunks);
  static_assert(kChunks % 2 == 0, "stmatrix_x4 moves two column chunks of 16 rows");

  int group;  // consumer warpgroup
  int warp;   // 0..3 within it
  int lane;

  // Byte address of chunk `chunk` (0..kChunks-1) of the warp's row `row` (0..15) in the scratch:
  // where store_ds puts the dS^T bytes of those keys and query columns (128B swizzle by key).
  TILEFMHA_DEVICE tile::u32 scratch(tile::u32 ds_buffer, int row, int chunk) const {
    const int key = group * Traits::kGroupKeyStride + warp * kWarpRows + row;
    const int query_chunk = (Traits::kSplitColumns ? group * kOwnedChunks : 0) + chunk;
    return ds_buffer + tile::u32((query_chunk / 8) * Traits::kKPanelBytes +
                                 sm90_swizzled_offset(key, query_chunk % 8));
  }

  // `out` points at the tile's first key row and the warpgroup's first column; rows from
  // `rows_left` on lie past what the tile writes.
  template <int kColumns>
  TILEFMHA_DEVICE void store(const float (&acc)[kColumns / 2], T* out, long long row_stride,
                             int rows_left, tile::u32 ds_buffer) const {
    const int first_row = group * Traits::kGroupKeyStride + warp * kWarpRows;
#pragma unroll
    for (int round = 0; round < kColumns / (8 * kChunks); ++round) {
      // Tile t of an stmatrix_x4: chunk 2 pair + t / 2, rows 8 (t % 2) on; lane l addresses row
      // l % 8 of tile l / 8.
      const int tile_of_lane = lane / 8;
#pragma unroll
      for (int pair = 0; pair < kChunks / 2; ++pair) {
        const int j = round * kChunks + 2 * pair;  // accumulator chunk
        tile::stmatrix_x4(
            scratch(ds_buffer, lane % 8 + 8 * (tile_of_lane % 2), 2 * pair + tile_of_lane / 2),
            tile::pack2<T>(acc[4 * j], acc[4 * j + 1]),
            tile::pack2<T>(acc[4 * j + 2], acc[4 * j + 3]),
            tile::pack2<T>(acc[4 * j + 4], acc[4 * j + 5]),
            tile::pack2<T>(acc[4 * j + 6], acc[4 * j + 7]));
      }
      __syncwarp();
#pragma unroll
      for (int pass = 0; pass < kChunks / 2; ++pass) {
        const int flat = pass * 32 + lane;
        const int row = flat / kChunks, chunk = flat % kChunks;
        tile::u32 value[4];
        tile::load_shared_v4(scratch(ds_buffer, row, chunk), value);
        if (first_row + row < rows_left)
          tile::store_global_v4(
              out + (first_row + row) * row_stride + (round * kChunks + chunk) * 8, value);
      }
      __syncwarp();
    }
  }
};

}  // namespace tilefmha::fmha
