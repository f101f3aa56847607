// A NaN among the inputs a row reads (q, k, v, an fp8 descale, a split partial) must reach that
// row's O and LSE; it must not pass for a fully masked row (O = 0, LSE = -inf), and rows that
// never read it must come out exactly as without it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/forward_problems.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using namespace tilefmha::testing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// O and LSE of every (b, h, i) row of a batch-mode problem, in a fixed order.
struct Outputs {
  std::vector<double> o, lse;
};
Outputs outputs(const Problem& p) {
  Outputs out;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.nhead_q; ++h)
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        out.lse.push_back(numeric::load(p.lse, {b, h, i}));
        for (int64_t d = 0; d < p.hdim_v; ++d) out.o.push_back(numeric::load(p.o, {b, i, h, d}));
      }
  return out;
}

// Runs `problem` clean, then with `poison` applied; expects the rows for which
// poisoned(b, h, i) holds NaN in every O element and in LSE, and every other row bit-identical
// to the clean run. Returns how many rows were poisoned.
template <class Poison, class Poisoned>
int64_t expect_nan_rows(const Problem& problem, Poison poison, Poisoned poisoned) {
  reference::forward(problem);
  const Outputs clean = outputs(problem);
  poison();
  reference::forward(problem);
  const Outputs dirty = outputs(problem);
  int64_t rows = 0, n = 0;
  for (int64_t b = 0; b < problem.batch; ++b)
    for (int64_t h = 0; h < problem.nhead_q; ++h)
      for (int64_t i = 0; i < problem.seqlen_q; ++i, ++n) {
        const bool nan = poisoned(b, h, i);
        rows += nan;
        if (nan) {
          EXPECT_TRUE(std::isnan(dirty.lse[n])) << "lse b=" << b << " h=" << h << " i=" << i;
        } else {
          EXPECT_EQ(dirty.lse[n], clean.lse[n]) << "lse b=" << b << " h=" << h << " i=" << i;
        }
        for (int64_t d = 0; d < problem.hdim_v; ++d) {
          const size_t e = static_cast<size_t>(n * problem.hdim_v + d);
          if (nan) {
            EXPECT_TRUE(std::isnan(dirty.o[e])) << "o b=" << b << " h=" << h << " i=" << i;
          } else {
            EXPECT_EQ(dirty.o[e], clean.o[e]) << "o b=" << b << " h=" << h << " i=" << i;
          }
        }
      }
  return rows;
}

TEST(ReferenceNaN, NanInQReachesOnlyItsRow) {
  TensorPool pool(1);
  const Problem p = batch_problem(pool, Family::fwd, DType::fp32, {2, 3, 3, 9, 11, 32, 32}).build();
  const int64_t rows = expect_nan_rows(
      p,
      [&] {
        numeric::store(p.q, {1, 4, 2, 7}, kNaN);
      },
      [](int64_t b, int64_t h, int64_t i) { return b == 1 && h == 2 && i == 4; });
  EXPECT_EQ(rows, 1);
}

TEST(ReferenceNaN, NanInQOfAFullyMaskedRowStaysMasked) {
  // Bottom-right causal with sq > sk: row 0 sees no key, so its q is never read.
  TensorPool pool(2);
  const Problem p = batch_problem(pool, Family::fwd, DType::fp32, {1, 1, 1, 6, 3, 32, 32})
                        .causal(MaskAlign::bottom_right)
                        .build();
  expect_nan_rows(
      p,
      [&] {
        numeric::store(p.q, {0, 0, 0, 0}, kNaN);
      },
      [](int64_t, int64_t, int64_t) { return false; });
  EXPECT_EQ(numeric::load(p.lse, {0, 0, 0}), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(numeric::load(p.o, {0, 0, 0, 0}), 0.0);
}

TEST(ReferenceNaN, NanInKReachesTheRowsThatSeeThatKey) {
  // Top-left causal, GQA (2 query heads per KV head): key 5 of KV head 1 is seen by rows >= 5
  // of query heads 2 and 3.
  TensorPool pool(3);
  const Problem p =
      batch_problem(pool, Family::fwd, DType::bf16, {2, 4, 2, 10, 10, 32, 32}).causal().build();
  const int64_t rows = expect_nan_rows(
      p,
      [&] {
        numeric::store(p.k, {0, 5, 1, 3}, kNaN);
      },
      [](int64_t b, int64_t h, int64_t i) { return b == 0 && h >= 2 && i >= 5; });
  EXPECT_EQ(rows, 2 * 5);
}

TEST(ReferenceNaN, NanInVReachesEveryRowThatWeighsIt) {
  TensorPool pool(4);
  const Problem p = batch_problem(pool, Family::fwd, DType::fp16, {1, 2, 1, 4, 6, 32, 32}).build();
  // LSE does not read V, so only O turns NaN; check O through the clean/dirty comparison of
  // every element of a row, LSE separately.
  reference::forward(p);
  const Outputs clean = outputs(p);
  numeric::store(p.v, {0, 2, 0, 9}, kNaN);
  reference::forward(p);
  const Outputs dirty = outputs(p);
  EXPECT_EQ(dirty.lse, clean.lse);
  for (size_t e = 0; e < dirty.o.size(); ++e) {
    const bool column_9 = e % 32 == 9;
    EXPECT_EQ(std::isnan(dirty.o[e]), column_9) << e;
  }
}

TEST(ReferenceNaN, NanPerBlockDescaleReachesItsRows) {
  const Dims d{2, 2, 1, 20, 24, 32, 32};
  TensorPool pool(5);
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_block;
  scales.q_block = pool.uniform(DType::fp32, {d.batch, d.nhead_q, 1}, 0.1, 2);
  scales.k_block = pool.uniform(DType::fp32, {d.batch, d.nhead_k, 1}, 0.1, 2);
  scales.v_block = pool.uniform(DType::fp32, {d.batch, d.nhead_k, 1}, 0.1, 2);
  const Problem p = batch_problem(pool, Family::fwd, DType::fp8_e4m3, d).fp8_scales(scales).build();
  const int64_t rows = expect_nan_rows(
      p,
      [&] {
        numeric::store(scales.q_block, {1, 0, 0}, kNaN);
      },
      [](int64_t b, int64_t h, int64_t) { return b == 1 && h == 0; });
  EXPECT_EQ(rows, d.seqlen_q);
}

TEST(ReferenceNaN, SplitKvCombinePropagatesNan) {
  // The NaN key lands in the second of three splits; the combined row must be NaN, not the
  // merge of the two clean splits.
  TensorPool pool(6);
  const Dims d{1, 1, 1, 3, 300, 32, 32};
  Problem forward = batch_problem(pool, Family::fwd, DType::fp32, d).build();
  numeric::store(forward.k, {0, 200, 0, 0}, kNaN);
  Problem partials = forward;
  partials.family = Family::fwd_splitkv;
  partials.split = {3, pool.filled(DType::fp32, {3, 1, 1, 3, 32}, kUnwritten),
                    pool.filled(DType::fp32, {3, 1, 1, 3}, kUnwritten)};
  Problem combine = partials;
  combine.family = Family::fwd_splitkv_combine;
  reference::forward_splitkv(partials);
  reference::splitkv_combine(combine);
  for (int64_t i = 0; i < d.seqlen_q; ++i) {
    EXPECT_TRUE(std::isnan(numeric::load(combine.lse, {0, 0, i})));
    EXPECT_TRUE(std::isnan(numeric::load(combine.o, {0, i, 0, 0})));
  }
}

}  // namespace
