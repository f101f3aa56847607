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

// ldmatrix lane offsets (SwizzledTile::lane_offsets): a panel row is 64 bytes whatever the tile,
// so one pair serves every tile and kernels may share it between tiles.
struct SwizzleLaneOffsets {
  u32 even, odd;
};

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

  // ldmatrix x4 row addresses of a 16x16 operand at (row_base, col_base), row_base a multiple
  // of 8 and col_base of 16. The lane's row r (0..15) and column c (0 or 8) inside the operand
  // fix the swizzle; only whether col_base is an odd multiple of 16 changes it. So a lane keeps
  // two offsets and every operand address is one of them plus a compile-time constant.
  using LaneOffsets = SwizzleLaneOffsets;
  TILEFMHA_DEVICE static LaneOffsets lane_offsets(int r, int c) {
    const int swizzle = (r >> 1) & 3;
    return {u32(r * 64 + (((c >> 3) ^ swizzle) << 4)),
            u32(r * 64 + (((2 | (c >> 3)) ^ swizzle) << 4))};
  }
  TILEFMHA_DEVICE static u32 operand(u32 tile, const LaneOffsets& lane, int row_base,
                                     int col_base) {
    return tile + ((col_base >> 4) & 1 ? lane.odd : lane.even) + (col_base >> 5) * kPanelBytes +
           row_base * 64;
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

// Hides a value from loop-invariant code motion: the compiler would otherwise precompute every
// step's 64-bit address of an unrolled tile copy once, outside the main loop, and keep them all
// in registers for its whole length.
TILEFMHA_DEVICE long long opaque(long long value) {
#if defined(__CUDA_ARCH__)
  long long result;
  asm volatile("mov.b64 %0, %1;" : "=l"(result) : "l"(value));
  return result;
#else
  return value;  // host builds of the headers (tests/support/emulation) have no PTX
#endif
}

// Issues cp.async copies of a Tile from global rows `row_stride` elements apart. Rows at or past
// `valid_rows` and columns at or past `valid_cols` are zero-filled (checked only when the
// corresponding Pad flag is set: without it the caller guarantees full tiles).
//
// Chunk `step * Threads + thread` (panel-major) sits at the thread's own chunk moved by a
// multiple of 8 rows and of 32 columns, which leaves the swizzle unchanged: each step's shared
// address is the thread's base plus a constant.
template <class Tile, int Threads, bool PadRows, bool PadCols, class Element>
TILEFMHA_DEVICE void load_tile_async(u32 smem_tile, const Element* global, long long row_stride,
                                     int valid_rows, int valid_cols, int thread) {
  constexpr int kPanelChunks = Tile::kRows * 4;
  constexpr bool kRegular = kPanelChunks % Threads == 0 || Threads % kPanelChunks == 0;
  if constexpr (kRegular) {
    constexpr int kSteps = (Tile::kChunks + Threads - 1) / Threads;
    int row, col;
    Tile::chunk_position(thread, row, col);
    const u32 smem_thread = smem_tile + Tile::offset(row, col);
    const long long stride = opaque(row_stride);
    const Element* source_thread = global + (row * stride + col);
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      if (Tile::kChunks % Threads != 0 && step * Threads + thread >= Tile::kChunks) break;
      // Rows and panels this step adds to the thread's own chunk.
      constexpr int kStepsPerPanel = kPanelChunks >= Threads ? kPanelChunks / Threads : 1;
      const int step_rows = kPanelChunks >= Threads ? (step % kStepsPerPanel) * (Threads / 4) : 0;
      const int step_panels =
          kPanelChunks >= Threads ? step / kStepsPerPanel : step * (Threads / kPanelChunks);
      const bool in_bounds = (!PadRows || row + step_rows < valid_rows) &&
                             (!PadCols || col + step_panels * 32 < valid_cols);
      const Element* source =
          in_bounds ? source_thread + (step_rows * stride + step_panels * 32) : global;
      tile::cp_async_cg_16(smem_thread + step_rows * 64 + step_panels * Tile::kPanelBytes, source,
                           in_bounds);
    }
  } else {
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
