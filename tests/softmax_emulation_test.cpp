// The Hopper forward's online softmax (kernels/fmha/fwd_sm90_softmax.h), compiled for the host
// against the stand-ins of tests/emulation/ and run by one warpgroup of std::threads, each holding
// its two rows of wgmma accumulators, over several key blocks of random scores. Rows that are
// queries must end with the reference's LSE and probabilities; a warp's row half with no query
// (a decode tile's padding) is skipped: its correction stays 1 block after block, even where its
// scores are NaN, and its LSE ends -inf.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "emulated_launch.hpp"
#include "fmha/fwd_sm90_softmax.h"

namespace tilefmha {
namespace {

constexpr int kRows = 64;  // a consumer warpgroup's rows
constexpr int kColumns = 128;
constexpr int kThreads = 128;
constexpr float kScale = 0.7f;  // the folded softmax scale, base 2

// Accumulator row r of `thread` and the column of its element e of chunk j (the wgmma layout).
int row_of(int thread, int r) {
  return (thread / 32) * 16 + (thread % 32) / 4 + 8 * r;
}
int column_of(int thread, int j, int e) {
  return 8 * j + 2 * (thread % 4) + e;
}

struct Outcome {
  std::vector<float> lse = std::vector<float>(kRows);
  std::vector<float> last_p;  // [row][column] of the last block
  std::vector<int> corrections_not_one = std::vector<int>(kRows);  // blocks with correction != 1
};

// Runs the softmax over `blocks` key blocks of scores [block][row][column]; rows below
// `queries` are the tile's queries.
Outcome run(const std::vector<float>& scores, int blocks, int queries) {
  Outcome outcome;
  outcome.last_p.assign(kRows * kColumns, 0.0f);
  emulation::run_grid(1, kThreads, [&] {
    const int thread = int(threadIdx.x);
    fmha::Sm90OnlineSoftmax<kColumns, true> softmax;
    softmax.track_rows({row_of(thread, 0) < queries, row_of(thread, 1) < queries});
    float s[kColumns / 2];
    for (int block = 0; block < blocks; ++block) {
      for (int j = 0; j < kColumns / 8; ++j)
        for (int r = 0; r < 2; ++r)
          for (int e = 0; e < 2; ++e)
            s[4 * j + 2 * r + e] = scores[(size_t(block) * kRows + row_of(thread, r)) * kColumns +
                                          column_of(thread, j, e)];
      float correction[2];
      softmax.update(s, kScale, correction);
      // Rows are shared by a quad; the quad's lane 0 counts for it.
      for (int r = 0; r < 2; ++r)
        if (thread % 4 == 0 && correction[r] != 1.0f)
          ++outcome.corrections_not_one[row_of(thread, r)];
    }
    for (int j = 0; j < kColumns / 8; ++j)
      for (int r = 0; r < 2; ++r)
        for (int e = 0; e < 2; ++e)
          outcome.last_p[size_t(row_of(thread, r)) * kColumns + column_of(thread, j, e)] =
              s[4 * j + 2 * r + e];
    float normalizer[2], lse[2];
    softmax.finish<false>(kScale, 0.0f, 1.0f, normalizer, lse);
    if (thread % 4 == 0)
      for (int r = 0; r < 2; ++r) outcome.lse[row_of(thread, r)] = lse[r];
  });
  return outcome;
}

std::vector<float> random_scores(int blocks, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-6.0f, 6.0f);
  std::vector<float> scores(size_t(blocks) * kRows * kColumns);
  for (float& score : scores) score = uniform(generator);
  return scores;
}

// The reference LSE (natural log) of a row over every block.
double reference_lse(const std::vector<float>& scores, int blocks, int row) {
  double max2 = -std::numeric_limits<double>::infinity();
  for (int b = 0; b < blocks; ++b)
    for (int c = 0; c < kColumns; ++c)
      max2 = std::max(max2, double(scores[(size_t(b) * kRows + row) * kColumns + c]) * kScale);
  double total = 0.0;
  for (int b = 0; b < blocks; ++b)
    for (int c = 0; c < kColumns; ++c)
      total += std::exp2(double(scores[(size_t(b) * kRows + row) * kColumns + c]) * kScale - max2);
  return (max2 + std::log2(total)) * std::log(2.0);
}

class SoftmaxRows : public ::testing::TestWithParam<int> {};

TEST_P(SoftmaxRows, QueriesMatchTheReferenceAndPaddingIsSkipped) {
  const int queries = GetParam();
  constexpr int kBlocks = 3;
  std::vector<float> scores = random_scores(kBlocks, 17u + unsigned(queries));
  // The padding rows of a tile hold whatever shared memory held: NaN must not reach anything.
  for (int b = 0; b < kBlocks; ++b)
    for (int row = 0; row < kRows; ++row)
      if (row >= queries && (row / 8) % 2 == 1)
        for (int c = 0; c < kColumns; c += 5)
          scores[(size_t(b) * kRows + row) * kColumns + c] = std::nanf("");
  const Outcome outcome = run(scores, kBlocks, queries);
  for (int row = 0; row < kRows; ++row) {
    // A warp's row half (8 rows) is skipped when none of its rows is a query.
    const int half_begin = row / 8 * 8;
    const bool skipped = half_begin >= queries;
    if (row < queries) {
      EXPECT_NEAR(outcome.lse[row], reference_lse(scores, kBlocks, row), 1e-4) << "row " << row;
      for (int c = 0; c < kColumns; ++c) {
        const float p = outcome.last_p[size_t(row) * kColumns + c];
        EXPECT_TRUE(std::isfinite(p) && p >= 0.0f && p <= 1.0f) << "row " << row << " col " << c;
      }
    } else if (skipped) {
      EXPECT_EQ(outcome.corrections_not_one[row], 0) << "row " << row;
      EXPECT_EQ(outcome.lse[row], -std::numeric_limits<float>::infinity()) << "row " << row;
    }
  }
}

// 4: one decode position of a group of 4 (warp 0's first row half only); 20: a half of warp 1
// too; 64: every row.
INSTANTIATE_TEST_SUITE_P(Queries, SoftmaxRows, ::testing::Values(4, 20, 64));

TEST(SoftmaxRows, TheLastBlocksNumeratorsAreRelativeToTheRunningMaximum) {
  constexpr int kBlocks = 2;
  const std::vector<float> scores = random_scores(kBlocks, 5u);
  const Outcome outcome = run(scores, kBlocks, kRows);
  for (int row = 0; row < kRows; ++row) {
    double max2 = -std::numeric_limits<double>::infinity();
    for (int b = 0; b < kBlocks; ++b)
      for (int c = 0; c < kColumns; ++c)
        max2 = std::max(max2, double(scores[(size_t(b) * kRows + row) * kColumns + c]) * kScale);
    for (int c = 0; c < kColumns; ++c) {
      const double expected = std::exp2(
          double(scores[(size_t(kBlocks - 1) * kRows + row) * kColumns + c]) * kScale - max2);
      EXPECT_NEAR(outcome.last_p[size_t(row) * kColumns + c], expected, 1e-5)
          << "row " << row << " col " << c;
    }
  }
}

}  // namespace
}  // namespace tilefmha
