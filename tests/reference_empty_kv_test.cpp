// Problems where no query row has a key to see (every key length 0, total_k = 0) and problems
// with no query rows at all. By the engine's semantics a row with no visible key gets O = 0 and
// LSE = -inf, so these are valid problems, not errors; K/V views with no elements may have null
// data (nothing to point at), as a caller's empty tensors often do.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/forward_problems.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using namespace tilefmha::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kHeadsQ = 4, kHeadsK = 2, kDim = 32;

// Expects O = 0 and LSE = -inf for every one of `rows` rows of view batch `view_batches`.
void expect_no_key_rows(const Problem& p, int64_t view_batches, int64_t rows) {
  int64_t checked = 0;
  for (int64_t b = 0; b < view_batches; ++b)
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t h = 0; h < p.nhead_q; ++h) {
        EXPECT_EQ(numeric::load(p.lse, {b, h, t}), -kInf) << "b=" << b << " t=" << t;
        for (int64_t d = 0; d < p.hdim_v; ++d, ++checked)
          ASSERT_EQ(numeric::load(p.o, {b, t, h, d}), 0.0) << "b=" << b << " t=" << t;
      }
  EXPECT_GT(checked, 0);
}

TEST(ReferenceEmptyKv, BatchModeWithNoKeys) {
  TensorPool pool(1);
  const Problem p = ProblemBuilder(Family::fwd)
                        .dtype(DType::bf16)
                        .shape(2, kHeadsQ, kHeadsK, 5, 0, kDim, kDim)
                        .q(pool.uniform(DType::bf16, {2, 5, kHeadsQ, kDim}, -1, 1))
                        .k(bshd(nullptr, DType::bf16, 2, 0, kHeadsK, kDim))
                        .v(bshd(nullptr, DType::bf16, 2, 0, kHeadsK, kDim))
                        .o(pool.filled(DType::bf16, {2, 5, kHeadsQ, kDim}, kUnwritten))
                        .lse(pool.filled(DType::fp32, {2, kHeadsQ, 5}, kUnwritten))
                        .build();
  reference::forward(p);
  expect_no_key_rows(p, 2, 5);
}

TEST(ReferenceEmptyKv, VarlenBatchWhoseKeysAreAllEmpty) {
  // Two sequences of 3 and 4 queries, both with key length 0: total_k = 0.
  TensorPool pool(2);
  const Problem p = ProblemBuilder(Family::fwd)
                        .dtype(DType::fp32)
                        .shape(1, kHeadsQ, kHeadsK, 0, 0, kDim, kDim)
                        .group({0, 3, 7}, {0, 0, 0})
                        .causal(MaskAlign::bottom_right)
                        .q(pool.uniform(DType::fp32, {1, 7, kHeadsQ, kDim}, -1, 1))
                        .k(bshd(nullptr, DType::fp32, 1, 0, kHeadsK, kDim))
                        .v(bshd(nullptr, DType::fp32, 1, 0, kHeadsK, kDim))
                        .o(pool.filled(DType::fp32, {1, 7, kHeadsQ, kDim}, kUnwritten))
                        .lse(pool.filled(DType::fp32, {1, kHeadsQ, 7}, kUnwritten))
                        .build();
  reference::forward(p);
  expect_no_key_rows(p, 1, 7);
}

TEST(ReferenceEmptyKv, SplitKvOfNoKeysCombinesToZero) {
  TensorPool pool(3);
  Problem forward = ProblemBuilder(Family::fwd)
                        .dtype(DType::fp32)
                        .shape(1, kHeadsQ, kHeadsK, 0, 0, kDim, kDim)
                        .group({0, 2, 5}, {0, 0, 0})
                        .q(pool.uniform(DType::fp32, {1, 5, kHeadsQ, kDim}, -1, 1))
                        .k(bshd(nullptr, DType::fp32, 1, 0, kHeadsK, kDim))
                        .v(bshd(nullptr, DType::fp32, 1, 0, kHeadsK, kDim))
                        .o(pool.filled(DType::fp32, {1, 5, kHeadsQ, kDim}, kUnwritten))
                        .lse(pool.filled(DType::fp32, {1, kHeadsQ, 5}, kUnwritten))
                        .build();
  Problem partials = forward;
  partials.family = Family::fwd_splitkv;
  partials.split = {2, pool.filled(DType::fp32, {2, 1, kHeadsQ, 5, kDim}, kUnwritten),
                    pool.filled(DType::fp32, {2, 1, kHeadsQ, 5}, kUnwritten)};
  Problem combine = partials;
  combine.family = Family::fwd_splitkv_combine;
  reference::forward_splitkv(partials);
  reference::splitkv_combine(combine);
  expect_no_key_rows(combine, 1, 5);
}

// Paged caches whose sequences hold no key: the table has no page in use, but the pool exists.
void expect_paged_without_keys(Family family, PageTableKind table) {
  SCOPED_TRACE(std::string(to_string(family)) + "/" + std::string(to_string(table)));
  TensorPool pool(4);
  constexpr int64_t kPages = 2, kPageSize = 16;
  PagedKv paged;
  paged.table = table;
  paged.page_size = kPageSize;
  paged.num_pages = kPages;
  if (table == PageTableKind::vllm_block_table) {
    paged.max_pages_per_seq = 1;
    paged.block_table = {0, 0};
  } else {
    paged.page_indptr = {0, 0, 0};
  }
  const bool batch_mode = family == Family::fwd_pagedkv;
  const int64_t view_batches = batch_mode ? 2 : 1, rows = batch_mode ? 3 : 6;
  ProblemBuilder builder(family);
  builder.dtype(DType::bf16);
  if (batch_mode)
    builder.shape(2, kHeadsQ, kHeadsK, 3, 0, kDim, kDim);
  else
    builder.shape(1, kHeadsQ, kHeadsK, 0, 0, kDim, kDim).group({0, 2, 6}, {});
  const Problem p =
      builder.key_lengths({0, 0})
          .paged(paged)
          .q(pool.uniform(DType::bf16, {view_batches, rows, kHeadsQ, kDim}, -1, 1))
          .k(pool.uniform(DType::bf16, {kPages, kPageSize, kHeadsK, kDim}, -1, 1))
          .v(pool.uniform(DType::bf16, {kPages, kPageSize, kHeadsK, kDim}, -1, 1))
          .o(pool.filled(DType::bf16, {view_batches, rows, kHeadsQ, kDim}, kUnwritten))
          .lse(pool.filled(DType::fp32, {view_batches, kHeadsQ, rows}, kUnwritten))
          .build();
  reference::forward(p);
  expect_no_key_rows(p, view_batches, rows);
}

TEST(ReferenceEmptyKv, PagedDecodeAndPrefillWithNoKeys) {
  for (const PageTableKind table :
       {PageTableKind::vllm_block_table, PageTableKind::sglang_page_list}) {
    expect_paged_without_keys(Family::fwd_pagedkv, table);
    expect_paged_without_keys(Family::batch_prefill, table);
  }
}

TEST(ReferenceEmptyKv, NoQueryRowsIsAValidProblemThatWritesNothing) {
  // seqlen_q = 0: an empty problem is valid (as an empty tensor is in Python); its outputs
  // have no elements, so null views serve.
  TensorPool pool(5);
  const Problem p = ProblemBuilder(Family::fwd)
                        .dtype(DType::fp16)
                        .shape(2, kHeadsQ, kHeadsK, 0, 7, kDim, kDim)
                        .q(bshd(nullptr, DType::fp16, 2, 0, kHeadsQ, kDim))
                        .k(pool.uniform(DType::fp16, {2, 7, kHeadsK, kDim}, -1, 1))
                        .v(pool.uniform(DType::fp16, {2, 7, kHeadsK, kDim}, -1, 1))
                        .o(bshd(nullptr, DType::fp16, 2, 0, kHeadsQ, kDim))
                        .lse(contiguous_view(nullptr, DType::fp32, {2, kHeadsQ, 0}))
                        .build();
  EXPECT_NO_THROW(reference::forward(p));
}

}  // namespace
