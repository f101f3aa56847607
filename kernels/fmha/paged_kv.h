// K/V tiles gathered from a paged cache (FwdParams' page_table): the portable kernel's
// replacement for the contiguous K/V tile load. A key block that lies inside one page (the
// page size a multiple of the block, so block-aligned keys never straddle pages) is one strided
// copy from that page; otherwise every row looks up its own page (page sizes below a block,
// e.g. 1 or 16). Rows at or past the sequence's keys are zero-filled and their page is never
// looked up: a table holds entries only for the sequence's own pages.
#pragma once

#include "fmha/fwd_params.h"
#include "fmha/smem_tile.h"
#include "tile/cp_async.h"
#include "tile/device.h"

namespace tilefmha::fmha {

// The pages of one sequence and where a key lives in them.
struct PagedKeys {
  const int* pages;
  long long page_size;

  TILEFMHA_DEVICE static PagedKeys make(const FwdParams& p, int b) {
    const long long first =
        p.page_indptr != nullptr ? p.page_indptr[b] : (long long)b * p.page_table_stride;
    return {p.page_table + first, p.page_size};
  }

  // Element offset of key `key`'s row in a pool with [page, slot] strides.
  TILEFMHA_DEVICE long long row_offset(int key, const TokenStrides& strides) const {
    // Page sizes and keys fit 32 bits (the kernels index keys in int); 32-bit division is the
    // cheaper one.
    const int size = int(page_size);
    const long long page = pages[key / size];
    return page * strides.batch + (long long)(key % size) * strides.seq;
  }
};

// Issues cp.async copies of the Tile of keys [key_begin, key_begin + Tile::kRows) of one head
// (`head`: the pool advanced to that head) into shared memory. valid_rows: keys of the block
// that exist; valid_cols: the real head dim (checked when PadCols).
template <class Tile, int Threads, bool PadCols, class Element>
TILEFMHA_DEVICE void load_paged_tile_async(u32 smem_tile, const Element* head,
                                           const TokenStrides& strides, const PagedKeys& keys,
                                           int key_begin, int valid_rows, int valid_cols,
                                           int thread) {
  if (keys.page_size % Tile::kRows == 0) {
    // key_begin is a multiple of the block, so the whole block sits in key_begin's page.
    load_tile_async<Tile, Threads, /*PadRows=*/true, PadCols>(
        smem_tile, head + keys.row_offset(key_begin, strides), strides.seq, valid_rows, valid_cols,
        thread);
    return;
  }
#pragma unroll
  for (int step = 0; step < (Tile::kChunks + Threads - 1) / Threads; ++step) {
    const int index = step * Threads + thread;
    if (Tile::kChunks % Threads == 0 || index < Tile::kChunks) {
      int row, col;
      Tile::chunk_position(index, row, col);
      const bool in_bounds = row < valid_rows && (!PadCols || col < valid_cols);
      const Element* source =
          in_bounds ? head + keys.row_offset(key_begin + row, strides) + col : head;
      tile::cp_async_cg_16(smem_tile + Tile::offset(row, col), source, in_bounds);
    }
  }
}

}  // namespace tilefmha::fmha
