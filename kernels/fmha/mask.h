// Mask hooks: which key blocks a query block visits, which of them need per-element masking,
// and the per-element visibility rule. Every hook also hides keys past the sequence end, so a
// ragged last block is masked like any boundary block.
//
//   NoMask      every key of the sequence
//   WindowMask  d - window_left <= j <= d + window_right, d = i (+ len_k - len_q bottom-right),
//               -1 = unbounded (causal is (-1, 0)); keys j < sink_tokens pass the left bound
#pragma once

#include "fmha/fwd_params.h"
#include "fmha/seq_info.h"
#include "tile/device.h"

namespace tilefmha::fmha {

// The key blocks of one query block: `sink_blocks` blocks from 0, then the window blocks
// [window_begin, window_end). Sink blocks never overlap the window ones.
struct KeyBlocks {
  int sink_blocks;
  int window_begin;
  int window_end;

  TILEFMHA_DEVICE int count() const { return sink_blocks + (window_end - window_begin); }
  TILEFMHA_DEVICE int block(int step) const {
    return step < sink_blocks ? step : window_begin + (step - sink_blocks);
  }
};

// Bounds on the rows that may see a block of keys: rows outside [first, last] see none of them,
// rows inside may still see none (a window's gaps between sinks and its left edge).
struct RowRange {
  static constexpr int kUnbounded = 1 << 30;  // beyond any row (WindowMask::kFar)
  int first, last;
};

TILEFMHA_DEVICE int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

struct NoMask {
  int len_k;

  TILEFMHA_DEVICE NoMask(const FwdParams&, const SeqInfo& seq, int, int) : len_k(seq.len_k) {}

  TILEFMHA_DEVICE KeyBlocks key_blocks(int block_n) const {
    return {0, 0, ceil_div(len_k, block_n)};
  }
  TILEFMHA_DEVICE bool block_needs_mask(int key_begin, int block_n) const {
    return key_begin + block_n > len_k;
  }
  TILEFMHA_DEVICE bool visible(int, int j) const { return j < len_k; }
  TILEFMHA_DEVICE RowRange rows_seeing(int, int) const { return {0, RowRange::kUnbounded}; }
};

struct WindowMask {
  int len_k;
  // Key j is visible to row i when i + low_offset <= j <= i + high_offset, or j < sink and the
  // right bound holds. Unbounded sides and far offsets are clamped to +-2^30, beyond any index,
  // so the per-element test stays in 32 bits.
  int low_offset, high_offset;
  int sink;
  int first_row, last_row;  // the query block's rows inside the sequence

  static constexpr long long kFar = 1ll << 30;
  TILEFMHA_DEVICE static int clamp_far(long long value) {
    return int(value < -kFar ? -kFar : (value > kFar ? kFar : value));
  }

  TILEFMHA_DEVICE WindowMask(const FwdParams& p, const SeqInfo& seq, int m_begin, int block_m)
      : len_k(seq.len_k), first_row(m_begin) {
    const long long shift = p.bottom_right ? seq.len_k - seq.len_q : 0;
    low_offset = p.window_left < 0 ? int(-kFar) : clamp_far(shift - p.window_left);
    high_offset = p.window_right < 0 ? int(kFar) : clamp_far(shift + p.window_right);
    sink = clamp_far(p.sink_tokens);
    last_row = (m_begin + block_m < seq.len_q ? m_begin + block_m : seq.len_q) - 1;
  }

  TILEFMHA_DEVICE KeyBlocks key_blocks(int block_n) const {
    // Highest key any row sees (right bound of the last row) and lowest key of the window
    // (left bound of the first row).
    const long long high = last_row + (long long)high_offset < len_k - 1
                               ? last_row + (long long)high_offset
                               : len_k - 1;
    const long long low = first_row + (long long)low_offset > 0 ? first_row + low_offset : 0;
    if (high < 0) return {0, 0, 0};
    // Sinks obey the right bound too.
    const long long sink_end = sink < high + 1 ? sink : high + 1;
    const int sink_blocks = int((sink_end + block_n - 1) / block_n);
    if (low > high) return {sink_blocks, 0, 0};
    const int window_begin = int(low / block_n);
    const int window_end = int(high / block_n) + 1;
    return {sink_blocks < window_begin ? sink_blocks : window_begin, window_begin, window_end};
  }

  // A block needs per-element masking unless every row of the query block sees every key.
  TILEFMHA_DEVICE bool block_needs_mask(int key_begin, int block_n) const {
    const int key_last = key_begin + block_n - 1;
    if (key_last >= len_k) return true;
    if (key_last > first_row + high_offset) return true;
    const bool all_sinks = key_last < sink;
    return !all_sinks && key_begin < last_row + low_offset;
  }

  // Row i sees no key above i + high_offset and, past the sinks, none below i + low_offset. The
  // offsets are the same whatever query block the mask was made for.
  TILEFMHA_DEVICE RowRange rows_seeing(int key_begin, int key_last) const {
    return {clamp_far((long long)key_begin - high_offset),
            key_begin < sink ? RowRange::kUnbounded : clamp_far((long long)key_last - low_offset)};
  }

  // Non-short-circuit operators: the test runs per element of a masked block, where branches
  // would open a divergence region each.
  TILEFMHA_DEVICE bool visible(int i, int j) const {
    return (j < len_k) & (j <= i + high_offset) & ((j >= i + low_offset) | (j < sink));
  }
};

}  // namespace tilefmha::fmha
