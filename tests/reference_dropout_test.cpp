// Dropout in the forward reference: keep rate, the stored random bytes, determinism in
// (seed, offset), and the output against a formula that draws its own Philox words.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "common/philox.h"
#include "support/forward_problems.hpp"
#include "support/naive_forward.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using namespace tilefmha::testing;

namespace {

// Top byte of floor(p * 2^32): a stored byte above it is certainly kept, below it dropped.
int64_t threshold_byte(double p) {
  return static_cast<int64_t>(std::ldexp(p, 32)) >> 24;
}

// Q = 0 makes every visible key equally likely (P = 1 / sk) and V row j = e_j makes
// O[i, j] = drop(i, j) / sk: the forward's own keep decisions become readable from O.
struct KeepMaskProblem {
  Problem problem;
  TensorView random_values;
};
KeepMaskProblem keep_mask_problem(TensorPool& pool, double p, uint64_t seed, uint64_t offset) {
  const Dims d{4, 8, 2, 128, 32, 32, 32};
  const TensorView v = pool.filled(DType::fp32, {d.batch, d.seqlen_k, d.nhead_k, d.hdim_v}, 0);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = 0; j < d.seqlen_k; ++j)
      for (int64_t hk = 0; hk < d.nhead_k; ++hk) numeric::store(v, {b, j, hk, j}, 1.0);
  const TensorView random_values =
      pool.filled(DType::uint8, {d.batch, d.nhead_q, d.seqlen_q, d.seqlen_k}, 0);
  const Problem problem =
      batch_problem(pool, Family::fwd, DType::fp32, d)
          .q(pool.filled(DType::fp32, {d.batch, d.seqlen_q, d.nhead_q, d.hdim_q}, 0))
          .v(v)
          .dropout(p, seed, offset, random_values)
          .build();
  return {problem, random_values};
}

TEST(ReferenceDropout, KeepRateAndStoredRandomValuesAgree) {
  for (const double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    TensorPool pool(300);
    const KeepMaskProblem c = keep_mask_problem(pool, p, 0x1234567890abcdefull, 42);
    const Problem& problem = c.problem;
    reference::forward(problem);
    const double kept_value = 1.0 / problem.seqlen_k / (1.0 - p);
    const int64_t threshold = threshold_byte(p);
    int64_t kept = 0, total = 0, ambiguous = 0;
    for (int64_t b = 0; b < problem.batch; ++b)
      for (int64_t h = 0; h < problem.nhead_q; ++h)
        for (int64_t i = 0; i < problem.seqlen_q; ++i)
          for (int64_t j = 0; j < problem.seqlen_k; ++j, ++total) {
            const double o = numeric::load(problem.o, {b, i, h, j});
            const bool is_kept = o != 0.0;
            if (is_kept) {
              ASSERT_FLOAT_EQ(o, kept_value) << "kept values are scaled by 1/(1-p)";
            }
            kept += is_kept;
            const int64_t byte = static_cast<int64_t>(numeric::load(c.random_values, {b, h, i, j}));
            const unsigned word = philox::dropout_word(problem.dropout.seed, problem.dropout.offset,
                                                       b, h, problem.nhead_q, i, j);
            ASSERT_EQ(byte, word >> 24);
            if (byte > threshold) {
              ASSERT_TRUE(is_kept) << "byte " << byte << " above threshold " << threshold;
            } else if (byte < threshold) {
              ASSERT_FALSE(is_kept) << "byte " << byte << " below threshold " << threshold;
            } else {
              ++ambiguous;
            }
          }
    const double fraction = static_cast<double>(kept) / total;
    const double sigma = std::sqrt(p * (1 - p) / total);
    EXPECT_NEAR(fraction, 1.0 - p, 5 * sigma) << kept << " of " << total << " kept";
    // The byte decides all but about 1 / 256 of the elements.
    EXPECT_LT(ambiguous, total / 64);
  }
}

TEST(ReferenceDropout, SameSeedAndOffsetRepeatDifferentOnesChange) {
  const Dims d{2, 2, 2, 16, 40, 32, 32};
  TensorPool pool(310);
  const Problem base = batch_problem(pool, Family::fwd, DType::fp32, d).build();
  const auto run = [&](uint64_t seed, uint64_t offset) {
    Problem problem = base;
    problem.dropout = {0.4, seed, offset, pool.filled(DType::uint8, {2, 2, 16, 40}, 0)};
    problem.o = pool.filled(DType::fp32, {2, 16, 2, 32}, kUnwritten);
    reference::forward(problem);
    return problem;
  };
  const auto outputs_equal = [&](const Problem& a, const Problem& b) {
    for (int64_t n = 0; n < a.o.numel(); ++n)
      if (numeric::load(a.o.data, a.o.dtype, n) != numeric::load(b.o.data, b.o.dtype, n))
        return false;
    return true;
  };
  const auto bytes_equal = [&](const Problem& a, const Problem& b) {
    const TensorView &x = a.dropout.random_values, &y = b.dropout.random_values;
    int64_t same = 0;
    for (int64_t n = 0; n < x.numel(); ++n)
      same += numeric::load(x.data, x.dtype, n) == numeric::load(y.data, y.dtype, n);
    return same;
  };
  const Problem first = run(7, 100), again = run(7, 100);
  EXPECT_TRUE(outputs_equal(first, again));
  EXPECT_EQ(bytes_equal(first, again), first.dropout.random_values.numel());
  for (const Problem& other : {run(8, 100), run(7, 101), run(7, 100 + (1ull << 32))}) {
    EXPECT_FALSE(outputs_equal(first, other));
    // Unrelated bytes agree about 1 time in 256.
    EXPECT_LT(bytes_equal(first, other), first.dropout.random_values.numel() / 32);
  }
}

TEST(ReferenceDropout, OutputMatchesFormulaWithOwnPhiloxWords) {
  TensorPool pool(320);
  const TensorView sinks = pool.uniform(DType::fp32, {4}, -1, 1);
  const Problem batch = batch_problem(pool, Family::fwd, DType::fp32, {2, 4, 2, 13, 29, 32, 64})
                            .causal(MaskAlign::bottom_right)
                            .sink_logits(sinks)
                            .dropout(0.25, 99, 3)
                            .build();
  reference::forward(batch);
  EXPECT_GT(expect_matches_naive(batch, NaiveForward(batch)), 0);

  const Problem group =
      group_problem(pool, Family::fwd, DType::bf16, {0, 9, 9, 20}, {0, 14, 20, 33}, 4, 4, 64, 64)
          .window(4, 2, MaskAlign::top_left)
          .dropout(0.6, 0xfeedfacecafebeefull, 1ull << 40)
          .build();
  reference::forward(group);
  EXPECT_GT(expect_matches_naive(group, NaiveForward(group)), 0);
}

TEST(ReferenceDropout, GroupModeStoresLocalIndicesOnly) {
  // Random values are [batch, nhead_q, max sq, max sk] with local indices; entries beyond a
  // sequence's lengths are never written.
  TensorPool pool(330);
  const std::vector<int64_t> seqstart_q{0, 3, 10, 10}, seqstart_k{0, 8, 11, 17};
  constexpr double kSentinel = 0xA5;
  const TensorView random_values = pool.filled(DType::uint8, {3, 2, 7, 8}, kSentinel);
  const Problem problem =
      group_problem(pool, Family::fwd, DType::fp32, seqstart_q, seqstart_k, 2, 1, 32, 32)
          .dropout(0.5, 5, 6, random_values)
          .build();
  reference::forward(problem);
  int64_t written = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 7; ++i)
        for (int64_t j = 0; j < 8; ++j) {
          const double byte = numeric::load(random_values, {b, h, i, j});
          const bool inside =
              i < seqstart_q[b + 1] - seqstart_q[b] && j < seqstart_k[b + 1] - seqstart_k[b];
          if (inside) {
            ++written;
            EXPECT_EQ(byte, philox::dropout_word(5, 6, b, h, 2, i, j) >> 24);
          } else {
            EXPECT_EQ(byte, kSentinel) << "b=" << b << " i=" << i << " j=" << j;
          }
        }
  EXPECT_EQ(written, 2 * (3 * 8 + 7 * 3));
}

TEST(ReferenceDropout, SingleLongHeadSplitAcrossThreads) {
  // One (sequence, head) pair: its query rows are spread over several tasks, each of which must
  // store its own rows' random values and outputs.
  TensorPool pool(340);
  const TensorView random_values = pool.filled(DType::uint8, {1, 1, 90, 70}, 0);
  const Problem problem = batch_problem(pool, Family::fwd, DType::fp32, {1, 1, 1, 90, 70, 32, 32})
                              .causal(MaskAlign::bottom_right)
                              .dropout(0.3, 11, 12, random_values)
                              .build();
  reference::forward(problem);
  EXPECT_GT(expect_matches_naive(problem, NaiveForward(problem)), 0);
  for (int64_t i = 0; i < 90; ++i)
    for (int64_t j = 0; j < 70; ++j)
      ASSERT_EQ(numeric::load(random_values, {0, 0, i, j}),
                philox::dropout_word(11, 12, 0, 0, 1, i, j) >> 24);
}

}  // namespace
