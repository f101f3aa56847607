// The warp-MMA decode fragments (kernels/fmha/fwd_sm90_warp_mma.h) on the host through the SIMT
// emulation (tests/support/emulation: fibers for threads, warp collectives for mma.sync and
// ldmatrix): a Q tile and a K and a V stage are laid out in shared memory as the TMA loads write
// them (128-byte swizzle; K and V in whole-block panels, or in the paged 8-row groups), and the
// four warps of a consumer warpgroup each compute S = Q K^T over their 32 keys of the block, mask
// the keys past the sequence's end, and O += P V for a P the test chooses. S and O are compared
// with host sums over the same bf16 values, element by element in the accumulator order the
// epilogues read (rows lane / 4 and lane / 4 + 8). This checks the addressing, the swizzle, the
// ldmatrix tiles and the fragment orders without a GPU; the factors that merge the warps' softmax
// states are checked against one softmax over all their keys. The tile's pipeline and the merge's
// trip through shared memory (fwd_sm90_warp_decode.h) run on the GPU only (splitkv_sm90_gpu_test,
// decode_calls.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// The emulation's shims replace kernels/tile/ (this target puts tests/support/emulation first).
#include "simt_emulator.hpp"
// clang-format off
#include "fmha/fwd_sm90_warp_mma.h"
// clang-format on

#include "core/numeric.hpp"

namespace tilefmha::fmha {
alignas(1024) unsigned char shared[emulation::kSharedBytes];
}

namespace tilefmha {
namespace {

template <int Hdim, bool Paged>
struct WarpTraits {
  using Element = tile::bfloat16_t;
  static constexpr int kHdimQ = Hdim;
  static constexpr int kHdimV = Hdim;
  static constexpr int kBlockN = 128;
  static constexpr int kPanelElements = 64;
  static constexpr int kQPanelBytes = 64 * fmha::kSm90RowBytes;  // a 64-row Q tile per panel
  static constexpr bool kPaged = Paged;
  static constexpr bool kFp8 = false;
};

constexpr tile::u32 kQTile = 0;
constexpr tile::u32 kKStage = 0x10000;
constexpr tile::u32 kVStage = 0x20000;
constexpr int kRows = 16;
constexpr float kNegativeInfinity = -INFINITY;

// Byte offset of element (row, column) in a 128B-swizzled tile whose rows start at
// `row_offset(row)` and whose 64-column panels lie `panel_bytes` apart, as TMA writes it.
template <class RowOffset>
tile::u32 swizzled_offset(RowOffset row_offset, tile::u32 panel_bytes, int row, int column) {
  const int chunk = (column % 64) / 8;
  return tile::u32(column / 64) * panel_bytes + row_offset(row) +
         tile::u32(((chunk ^ (row & 7)) * 16) + (column % 8) * 2);
}

// A rows x hdim matrix of random bf16 values (as floats) stored into shared memory at `base`.
template <class RowOffset>
std::vector<float> place(std::mt19937& rng, tile::u32 base, int rows, int hdim,
                         RowOffset row_offset, tile::u32 panel_bytes) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(size_t(rows) * hdim);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < hdim; ++c) {
      const uint16_t bits = numeric::float_to_bf16(uniform(rng));
      values[size_t(r) * hdim + c] = numeric::bf16_to_float(bits);
      std::memcpy(fmha::shared + base + swizzled_offset(row_offset, panel_bytes, r, c), &bits, 2);
    }
  }
  return values;
}

template <int Hdim, bool Paged>
void check_block(int grouped, int len_k, unsigned seed) {
  using Traits = WarpTraits<Hdim, Paged>;
  using Mma = fmha::Sm90WarpMma<Traits>;
  SCOPED_TRACE("hdim " + std::to_string(Hdim) + (grouped ? ", 8-row groups" : ", panels") + ", " +
               std::to_string(len_k) + " keys");
  std::memset(fmha::shared, 0xFF, 0x30000);  // NaN bf16 wherever nothing was placed
  std::mt19937 rng(seed);
  const fmha::Sm90KvStageLayout<Traits> layout{grouped};
  auto q_row = [](int row) { return tile::u32(row) * fmha::kSm90RowBytes; };
  auto kv_row = [&](int row) { return layout.template row_offset<Hdim / 64>(row); };
  const std::vector<float> q =
      place(rng, kQTile, kRows, Hdim, q_row, tile::u32(Traits::kQPanelBytes));
  const std::vector<float> k = place(rng, kKStage, 128, Hdim, kv_row, layout.panel_bytes());
  const std::vector<float> v = place(rng, kVStage, 128, Hdim, kv_row, layout.panel_bytes());
  // P: bf16 values the test chooses, so that P V checks the B fragments apart from the softmax.
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> p(size_t(kRows) * 128);
  for (float& x : p) x = numeric::bf16_to_float(numeric::float_to_bf16(unit(rng)));

  std::vector<float> s_out(size_t(kRows) * 128, NAN);
  std::vector<float> o_out(size_t(4) * kRows * Hdim, NAN);  // each warp's O over its keys
  emulation::launch({1, 1, 1}, 128, [&] {
    const int thread = int(threadIdx.x);
    const Mma mma{thread / 32, thread % 32, layout};
    const int lane = mma.lane, warp = mma.warp;
    auto row_of = [&](int i) { return lane / 4 + 8 * (i / 2); };
    tile::u32 fragments[Mma::kQSteps][4];
    mma.load_q(kQTile, fragments);
    float s[Mma::kWarpKeys / 2];
    mma.qk(s, fragments, kKStage);
    if (len_k < 128) mma.mask_end(s, 0, len_k);
    for (int j = 0; j < Mma::kWarpKeys / 8; ++j) {
      for (int i = 0; i < 4; ++i) {
        const int key = Mma::kWarpKeys * warp + 8 * j + 2 * (lane % 4) + i % 2;
        s_out[size_t(row_of(i)) * 128 + key] = s[4 * j + i];
        s[4 * j + i] = p[size_t(row_of(i)) * 128 + key];
      }
    }
    tile::u32 packed[Mma::kKeySteps][4];
    Mma::pack_p(s, packed);
    float o[Hdim / 2] = {};
    mma.pv(o, packed, kVStage);
    for (int j = 0; j < Hdim / 8; ++j) {
      for (int i = 0; i < 4; ++i) {
        const int column = 8 * j + 2 * (lane % 4) + i % 2;
        o_out[(size_t(warp) * kRows + row_of(i)) * Hdim + column] = o[4 * j + i];
      }
    }
  });

  int checked = 0;
  for (int row = 0; row < kRows; ++row) {
    for (int key = 0; key < 128; ++key) {
      double expected = 0;
      for (int d = 0; d < Hdim; ++d)
        expected += double(q[size_t(row) * Hdim + d]) * k[size_t(key) * Hdim + d];
      const float actual = s_out[size_t(row) * 128 + key];
      if (key >= len_k) {
        EXPECT_EQ(actual, kNegativeInfinity) << "row " << row << ", key " << key;
      } else {
        EXPECT_NEAR(actual, expected, 1e-4 * Hdim) << "S row " << row << ", key " << key;
      }
      ++checked;
    }
  }
  for (int warp = 0; warp < 4; ++warp) {
    for (int row = 0; row < kRows; ++row) {
      for (int column = 0; column < Hdim; ++column) {
        double expected = 0;
        for (int key = 32 * warp; key < 32 * warp + 32; ++key)
          expected += double(p[size_t(row) * 128 + key]) * v[size_t(key) * Hdim + column];
        EXPECT_NEAR(o_out[(size_t(warp) * kRows + row) * Hdim + column], expected, 1e-4 * 32)
            << "O of warp " << warp << ", row " << row << ", column " << column;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, kRows * 128 + 4 * kRows * Hdim);
}

TEST(WarpMmaEmulated, PanelStagesAtHdim64And128) {
  check_block<64, false>(0, 128, 1);
  check_block<128, false>(0, 128, 2);
}

TEST(WarpMmaEmulated, KeysPastTheSequenceEndScoreMinusInfinity) {
  check_block<64, false>(0, 100, 3);  // warp 3's keys partly past the end
  check_block<128, false>(0, 37, 4);  // warps 1-3 see no key
}

// Paged caches of small pages lay a stage out in 8-row groups of every panel
// (fwd_sm90_kv_layout.h); the fragments must find the same rows there.
TEST(WarpMmaEmulated, PagedStagesInEightRowGroups) {
  check_block<128, true>(1, 128, 5);
  check_block<128, true>(0, 128, 6);
  check_block<64, true>(1, 77, 7);
}

// One row's scores split over four warps (`counts` keys each, none for a warp that saw no key):
// each warp's online-softmax state (raw max, sum and O of exp2((x - max) * scale)), merged with
// sm90_warp_merge_factors, against one softmax over all the keys.
void check_merge(const int (&counts)[4], unsigned seed) {
  constexpr float kScale = 0.18f;
  std::mt19937 rng(seed);
  std::normal_distribution<float> score(0.0f, 4.0f);
  float max[4], sum[4], o[4], factor[4];
  std::vector<float> all, values;
  for (int w = 0; w < 4; ++w) {
    std::vector<float> x(size_t(counts[w])), v(size_t(counts[w]));
    for (int i = 0; i < counts[w]; ++i) x[size_t(i)] = score(rng), v[size_t(i)] = score(rng);
    max[w] = kNegativeInfinity;
    for (float s : x) max[w] = std::max(max[w], s);
    sum[w] = o[w] = 0.0f;
    for (int i = 0; i < counts[w]; ++i) {
      const float p = std::exp2((x[size_t(i)] - max[w]) * kScale);
      sum[w] += p;
      o[w] += p * v[size_t(i)];
    }
    all.insert(all.end(), x.begin(), x.end());
    values.insert(values.end(), v.begin(), v.end());
  }
  const float joint = fmha::sm90_warp_merge_factors(max, kScale, factor);
  float merged_sum = 0.0f, merged_o = 0.0f;
  for (int w = 0; w < 4; ++w) {
    merged_sum += sum[w] * factor[w];
    merged_o += o[w] * factor[w];
    if (counts[w] == 0) {
      EXPECT_EQ(factor[w], 0.0f) << "a warp that saw no key adds nothing";
    }
  }
  if (all.empty()) {
    EXPECT_EQ(joint, kNegativeInfinity);
    EXPECT_EQ(merged_sum, 0.0f);
    EXPECT_EQ(merged_o, 0.0f);
    return;
  }
  double expected_max = all[0], expected_sum = 0, expected_o = 0;
  for (float s : all) expected_max = std::max(expected_max, double(s));
  for (size_t i = 0; i < all.size(); ++i) {
    const double p = std::exp2((all[i] - expected_max) * kScale);
    expected_sum += p;
    expected_o += p * values[i];
  }
  EXPECT_EQ(joint, float(expected_max));
  EXPECT_NEAR(merged_sum, expected_sum, 1e-5 * expected_sum);
  EXPECT_NEAR(merged_o / merged_sum, expected_o / expected_sum, 1e-4);
}

TEST(WarpMmaEmulated, MergeFactorsJoinTheWarpsSoftmaxStates) {
  check_merge({32, 32, 32, 32}, 11);
  check_merge({32, 32, 17, 0}, 12);  // the sequence ends inside warp 2's keys
  check_merge({5, 0, 0, 0}, 13);     // a short last block: warps 1-3 saw no key
  check_merge({0, 0, 0, 0}, 14);     // a padding row: no NaN, max -inf, nothing added
}

// A NaN score (max NaN in its warp) must reach the row's sum, as it does in one softmax.
TEST(WarpMmaEmulated, MergeFactorsCarryANanOn) {
  const float max[4] = {1.0f, NAN, 2.0f, kNegativeInfinity};
  float factor[4];
  const float joint = fmha::sm90_warp_merge_factors(max, 0.5f, factor);
  EXPECT_EQ(joint, 2.0f);
  EXPECT_TRUE(std::isnan(factor[1]));
  EXPECT_EQ(factor[3], 0.0f);
  EXPECT_EQ(factor[2], 1.0f);
}

}  // namespace
}  // namespace tilefmha
