// Shared-memory tiles of 16-bit elements for mma.sync operands.
//
// A tile of Rows x Cols (Cols a multiple of 32) is stored as Cols / 32 panels of Rows x 64 bytes.
// Inside a panel, row r holds four 16-byte chunks placed at chunk ^ ((r >> 1) & 3). Eight
// consecutive rows then cover all eight 16-byte bank groups, so the eight row reads of one
// ldmatrix 8x8 matrix and the 16-byte writes of eight consecutive threads never share a bank.
#pragma once

#include "tile/cp_async.h"
#include "tile/device.h"

namespace tilefmha::fmha {

using tile::u32;

template <int Rows, int Cols>
struct SwizzledTile {
  static_assert(Cols % 32 == 0, "tiles are built from 32-column panels");
  static constexpr int kRows = Rows;
  static constexpr int kCols = Cols;
  static constexpr int kPanelBytes = Rows * 64;
  static constexpr int kBytes = Rows * Cols * 2;
  static constexpr int kChunks = Rows * Cols / 8;  // 16-byte chunks

  // Byte offset of element (row, col); a 16-byte chunk or a 4-byte pair never straddles.
  TILEFMHA_DEVICE static u32 offset(int row, int col) {
    const int chunk = ((col >> 3) & 3) ^ ((row >> 1) & 3);
    return u32((col >> 5) * kPanelBytes + row * 64 + (chunk << 4) + ((col & 7) << 1));
  }

  // Chunk `index` in panel-major order: consecutive threads walk the four chunks of a row, then
  // the next row, which keeps global reads sector-complete and shared writes conflict-free.
  TILEFMHA_DEVICE static void chunk_position(int index, int& row, int& col) {
    const int panel = index / (Rows * 4);
    const int within = index - panel * (Rows * 4);
    row = within >> 2;
    col = panel * 32 + (within & 3) * 8;
  }
};

// Issues cp.async copies of a Tile from global rows `row_stride` elements apart. Rows at or past
// `valid_rows` and columns at or past `valid_cols` are zero-filled (checked only when the
// corresponding Pad flag is set: without it the caller guarantees full tiles).
template <class Tile, int Threads, bool PadRows, bool PadCols, class Element>
TILEFMHA_DEVICE void load_tile_async(u32 smem_tile, const Element* global, long long row_stride,
                                     int valid_rows, int valid_cols, int thread) {
#pragma unroll
  for (int step = 0; step < (Tile::kChunks + Threads - 1) / Threads; ++step) {
    const int index = step * Threads + thread;
    if (Tile::kChunks % Threads == 0 || index < Tile::kChunks) {
      int row, col;
      Tile::chunk_position(index, row, col);
      const bool in_bounds = (!PadRows || row < valid_rows) && (!PadCols || col < valid_cols);
      const Element* source = in_bounds ? global + row * row_stride + col : global;
      tile::cp_async_cg_16(smem_tile + Tile::offset(row, col), source, in_bounds);
    }
  }
}

// Copies a Tile from shared memory to global rows, 16 bytes per thread and step, skipping rows
// and columns outside the valid region.
template <class Tile, int Threads, class Element>
TILEFMHA_DEVICE void store_tile(const unsigned char* smem_tile, Element* global,
                                long long row_stride, int valid_rows, int valid_cols, int thread) {
#pragma unroll
  for (int step = 0; step < (Tile::kChunks + Threads - 1) / Threads; ++step) {
    const int index = step * Threads + thread;
    if (Tile::kChunks % Threads == 0 || index < Tile::kChunks) {
      int row, col;
      Tile::chunk_position(index, row, col);
      if (row < valid_rows && col < valid_cols) {
        const uint4 chunk = *reinterpret_cast<const uint4*>(smem_tile + Tile::offset(row, col));
        *reinterpret_cast<uint4*>(global + row * row_stride + col) = chunk;
      }
    }
  }
}

}  // namespace tilefmha::fmha
