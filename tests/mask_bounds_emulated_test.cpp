// The masks' row bounds (kernels/fmha/mask.h, RowRange) against their own per-element rule, on
// the host through the emulation's device shims: the Hopper backward walks only the query blocks
// of rows_seeing, so every row that sees a key of a block must lie inside the bound, for every
// window, alignment, sink count and ragged length. Brute force over small shapes.
#include <gtest/gtest.h>

#include <vector>

// The emulation's shims replace kernels/tile/ (this target puts tests/support/emulation first).
#include "fmha/mask.h"

namespace tilefmha {
namespace {

struct MaskCase {
  int len_q, len_k;
  long long window_left, window_right;  // -1: unbounded
  bool bottom_right;
  long long sink_tokens;
};

fmha::FwdParams params_of(const MaskCase& c) {
  fmha::FwdParams p{};
  p.seqlen_q = c.len_q;
  p.seqlen_k = c.len_k;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.bottom_right = c.bottom_right ? 1 : 0;
  p.sink_tokens = c.sink_tokens;
  return p;
}

template <class Mask>
void expect_rows_inside_bounds(const MaskCase& c, int block_n, const char* label) {
  const fmha::FwdParams p = params_of(c);
  const fmha::SeqInfo seq = fmha::SeqInfo::make<false>(p, 0);
  const Mask mask(p, seq, 0, 64);
  int rows_seen = 0;
  for (int key_begin = 0; key_begin < c.len_k; key_begin += block_n) {
    const fmha::RowRange bound = mask.rows_seeing(key_begin, key_begin + block_n - 1);
    for (int i = 0; i < c.len_q; ++i) {
      bool sees = false;
      for (int j = key_begin; j < key_begin + block_n && j < c.len_k; ++j)
        sees = sees || mask.visible(i, j);
      if (!sees) continue;
      ++rows_seen;
      EXPECT_GE(i, bound.first) << label << ": row " << i << ", keys from " << key_begin;
      EXPECT_LE(i, bound.last) << label << ": row " << i << ", keys from " << key_begin;
    }
  }
  EXPECT_GT(rows_seen, 0) << label << ": the case sees no key at all, so it tests nothing";
}

TEST(MaskRowBounds, EveryRowThatSeesAKeyBlockLiesInsideItsBound) {
  const std::vector<MaskCase> cases = {
      {300, 300, -1, 0, false, 0},      // causal, top-left
      {200, 520, -1, 0, true, 0},       // causal, bottom-right, more keys
      {350, 77, -1, 0, true, 0},        // bottom-right with fully masked first rows
      {600, 700, 150, 8, true, 4},      // window with sinks inside the first block
      {700, 900, 200, 30, false, 130},  // sinks past the first block
      {500, 500, 64, 64, false, 0},     // symmetric local window
      {256, 384, 0, 0, false, 0},       // the diagonal alone
      {333, 400, -1, -1, false, 0},     // unbounded both sides
      {129, 1000, 10, -1, true, 300},   // right side unbounded, many sinks
  };
  for (const MaskCase& c : cases) {
    for (int block_n : {64, 128}) {
      expect_rows_inside_bounds<fmha::WindowMask>(c, block_n, "WindowMask");
      expect_rows_inside_bounds<fmha::NoMask>(c, block_n, "NoMask");
    }
  }
}

// The bound must also be tight where it matters: under a causal mask a key block's first row is
// the block's first key (top-left), so a walk from it skips every query block above it.
TEST(MaskRowBounds, CausalBoundStartsAtTheKeyBlocksDiagonal) {
  const fmha::FwdParams p = params_of({1024, 1024, -1, 0, false, 0});
  const fmha::SeqInfo seq = fmha::SeqInfo::make<false>(p, 0);
  const fmha::WindowMask mask(p, seq, 0, 64);
  EXPECT_EQ(mask.rows_seeing(512, 639).first, 512);
  EXPECT_GE(mask.rows_seeing(512, 639).last, 1023);
  const fmha::FwdParams shifted = params_of({256, 1024, -1, 0, true, 0});
  const fmha::SeqInfo shifted_seq = fmha::SeqInfo::make<false>(shifted, 0);
  // Bottom-right: row i sees keys up to i + 768.
  EXPECT_EQ(fmha::WindowMask(shifted, shifted_seq, 0, 64).rows_seeing(896, 1023).first, 128);
}

}  // namespace
}  // namespace tilefmha
