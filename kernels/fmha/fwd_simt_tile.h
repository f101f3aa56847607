// fp32 shared-memory tiles of the simt_f32 forward kernel and the one warp primitive it adds.
//   * Tiles are row-major [Rows][Cols] fp32 with Cols a multiple of 32. Q and K are read down a
//     column (eight lanes, eight different rows, one head-dim index), which in a plain layout
//     puts every row in the same bank; XOR-ing the column with the row's low five bits spreads
//     the rows over all banks while keeping each row inside its own 32-float segment.
//   * Loads move single floats: any 4-byte-aligned pointer and any 64-bit stride work. Elements
//     outside the sequence or head dim read as 0, so padded rows and columns add nothing (and
//     never turn into NaN through 0 * garbage).
#pragma once

#include "tile/device.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

template <int Cols, bool Swizzled>
TILEFMHA_DEVICE int simt_tile_offset(int row, int col) {
  static_assert(!Swizzled || Cols % 32 == 0, "swizzled tiles need 32-float row segments");
  return row * Cols + (Swizzled ? col ^ (row & 31) : col);
}

// Copies source[row * row_stride + col] for row < valid_rows, col < valid_cols (checked only
// where the CheckRows / CheckCols flags say a tile can be ragged); consecutive threads take
// consecutive columns so a warp reads whole row segments.
template <int Rows, int Cols, int Threads, bool Swizzled, bool CheckRows, bool CheckCols>
TILEFMHA_DEVICE void load_simt_tile(float* tile, const float* source, long long row_stride,
                                    int valid_rows, int valid_cols, int thread) {
#pragma unroll 4
  for (int index = thread; index < Rows * Cols; index += Threads) {
    const int row = index / Cols;
    const int col = index % Cols;
    const bool inside = (!CheckRows || row < valid_rows) && (!CheckCols || col < valid_cols);
    tile[simt_tile_offset<Cols, Swizzled>(row, col)] =
        inside ? source[row * row_stride + col] : 0.0f;
  }
}

// The value `value` holds in lane `source_lane` of the warp.
TILEFMHA_DEVICE float shuffle_index(float value, int source_lane) {
  float other;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, %3;\n"
               : "=f"(other)
               : "f"(value), "r"(source_lane), "r"(tile::full_warp_mask));
  return other;
}

// Butterfly max / sum over the eight lanes 8g..8g+7 that share a query row.
TILEFMHA_DEVICE float octet_max(float value) {
  value = tile::max_f32(value, tile::shuffle_xor(value, 4));
  value = tile::max_f32(value, tile::shuffle_xor(value, 2));
  return tile::max_f32(value, tile::shuffle_xor(value, 1));
}

TILEFMHA_DEVICE float octet_sum(float value) {
  value += tile::shuffle_xor(value, 4);
  value += tile::shuffle_xor(value, 2);
  return value + tile::shuffle_xor(value, 1);
}

}  // namespace tilefmha::fmha
