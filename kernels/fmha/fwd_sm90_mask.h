// Element masks of the sm90 consumer. The mask hooks of fmha/mask.h choose the key blocks a
// tile visits (KeyBlocks); inside a block, a consumer thread tests its two accumulator rows.
// The window mask is re-expressed per row as two 32-bit bounds computed once per tile, so little
// state stays live beside the S, P and O accumulators. The two sides are tested apart, each only
// in blocks that cross it: the right side (the causal diagonal, the sequence end) as a per-row
// limit on the key's offset in the block, so an element costs one compare with a compile-time
// column and a select; the left side (windows, sinks) with the full test:
//
//   NoMask      key j visible iff j < len_k
//   WindowMask  j <= high(i) and (j >= low(i) or j < sink), where high folds the sequence end
//               and the right bound and low the left bound of row i's shifted diagonal
//               (FwdParams: window_left/right, -1 unbounded; sink_tokens; bottom_right)
#pragma once

#include "fmha/fwd_params.h"
#include "fmha/mask.h"
#include "fmha/seq_info.h"
#include "tile/device.h"

namespace tilefmha::fmha {

template <class Mask>
struct Sm90ElementMask;

template <>
struct Sm90ElementMask<NoMask> {
  int len_k;

  // `rows`: sequence-relative query rows of the thread's accumulator rows 0 and 1.
  TILEFMHA_DEVICE Sm90ElementMask(const FwdParams&, const SeqInfo& seq, int, int, const int (&)[2])
      : len_k(seq.len_k) {}

  TILEFMHA_DEVICE bool block_crosses_high(int key_begin, int block_n) const {
    return key_begin + block_n > len_k;
  }
  // Offset from key_begin of the last key row `row_slot` sees.
  TILEFMHA_DEVICE int last_visible(int, int key_begin) const { return len_k - 1 - key_begin; }
  TILEFMHA_DEVICE bool block_crosses_low(int, int) const { return false; }
  TILEFMHA_DEVICE bool visible_low(int, int) const { return true; }
};

template <>
struct Sm90ElementMask<WindowMask> {
  int high[2];     // last visible key of each row (-1: none)
  int low[2];      // first visible key of each row's window (sinks aside)
  int sink;        // keys below stay visible (up to high)
  int block_high;  // lowest `high` over the tile's rows: past it some row is masked
  int block_low;   // highest `low` over the tile's rows: before it some row is masked

  TILEFMHA_DEVICE static int clamp(long long value, int lo, int hi) {
    return value < lo ? lo : (value > hi ? hi : int(value));
  }

  TILEFMHA_DEVICE Sm90ElementMask(const FwdParams& p, const SeqInfo& seq, int m_begin, int block_m,
                                  const int (&rows)[2]) {
    constexpr int kFar = 1 << 30;
    const long long shift = p.bottom_right ? seq.len_k - seq.len_q : 0;
    auto high_of = [&](long long row) {
      long long h = seq.len_k - 1;
      if (p.window_right >= 0 && row + shift + p.window_right < h) h = row + shift + p.window_right;
      return clamp(h, -1, kFar);
    };
    auto low_of = [&](long long row) {
      return p.window_left < 0 ? 0 : clamp(row + shift - p.window_left, 0, kFar);
    };
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      high[r] = high_of(rows[r]);
      low[r] = low_of(rows[r]);
    }
    sink = clamp(p.sink_tokens, 0, kFar);
    const int last_row = (m_begin + block_m < seq.len_q ? m_begin + block_m : seq.len_q) - 1;
    block_high = high_of(m_begin);
    block_low = low_of(last_row);
  }

  TILEFMHA_DEVICE bool block_crosses_high(int key_begin, int block_n) const {
    return key_begin + block_n - 1 > block_high;
  }
  TILEFMHA_DEVICE int last_visible(int row_slot, int key_begin) const {
    return high[row_slot] - key_begin;
  }
  TILEFMHA_DEVICE bool block_crosses_low(int key_begin, int block_n) const {
    return (key_begin + block_n - 1 >= sink) & (key_begin < block_low);
  }
  // Non-short-circuit operators on purpose: with && and || the compiler branches per element
  // (a divergence region each), which made a diagonal block cost ~4x a full one.
  TILEFMHA_DEVICE bool visible_low(int row_slot, int key) const {
    return (key >= low[row_slot]) | (key < sink);
  }
};

}  // namespace tilefmha::fmha
