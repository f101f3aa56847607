// Split-KV partials + combine equal the forward; paged K/V (both table kinds, both layouts, any
// page size, shuffled pages, per-page fp8 scales) equals the same K/V stored contiguously.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/forward_problems.hpp"
#include "support/naive_forward.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using namespace tilefmha::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// Split-KV

// Query rows of a problem as (sequence, local index, view batch, view seq).
struct QueryRow {
  int64_t b, i, view_batch, view_seq;
};
std::vector<QueryRow> query_rows(const Problem& p) {
  std::vector<QueryRow> rows;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t count =
        p.mode == Mode::group ? p.seqstart_q[b + 1] - p.seqstart_q[b] : p.seqlen_q;
    for (int64_t i = 0; i < count; ++i)
      rows.push_back(p.mode == Mode::group ? QueryRow{b, i, 0, p.seqstart_q[b] + i}
                                           : QueryRow{b, i, b, i});
  }
  return rows;
}

// The partials problem and the combine problem of `forward` (same inputs, own outputs).
struct SplitProblems {
  Problem partials, combine;
};
SplitProblems make_split(TensorPool& pool, const Problem& forward, int64_t num_splits) {
  const int64_t rows_batch = forward.mode == Mode::group ? 1 : forward.batch;
  const int64_t rows_seq = forward.mode == Mode::group ? forward.total_q() : forward.seqlen_q;
  SplitProblems out{forward, forward};
  out.partials.family = Family::fwd_splitkv;
  out.partials.split = {
      num_splits,
      pool.filled(DType::fp32, {num_splits, rows_batch, forward.nhead_q, rows_seq, forward.hdim_v},
                  kUnwritten),
      pool.filled(DType::fp32, {num_splits, rows_batch, forward.nhead_q, rows_seq}, kUnwritten)};
  out.combine = out.partials;
  out.combine.family = Family::fwd_splitkv_combine;
  out.combine.o = pool.filled(forward.out_dtype,
                              {rows_batch, rows_seq, forward.nhead_q, forward.hdim_v}, kUnwritten);
  out.combine.lse = pool.filled(DType::fp32, {rows_batch, forward.nhead_q, rows_seq}, kUnwritten);
  return out;
}

// The partials are fp32: each o_acc element carries a relative rounding error of 2^-24 and each
// lse_acc one of 2^-24 * |lse|, which moves the combine weights by as much. With |v| <= 1 the
// combined output may thus drift from the forward by about 2^-23 * (1 + |lse|) beyond the
// output's own rounding; the LSE by about one fp32 ulp.
double split_slack(double lse) {
  return std::ldexp(1.0, -22) * (1.0 + (std::isfinite(lse) ? std::fabs(lse) : 0.0));
}

// Runs forward, partials and combine; expects the combined O and LSE equal to the forward's.
void expect_split_equals_forward(TensorPool& pool, const Problem& forward, int64_t num_splits) {
  SCOPED_TRACE("num_splits=" + std::to_string(num_splits));
  const SplitProblems split = make_split(pool, forward, num_splits);
  reference::forward(forward);
  reference::forward_splitkv(split.partials);
  reference::splitkv_combine(split.combine);
  const std::vector<QueryRow> rows = query_rows(forward);
  ASSERT_FALSE(rows.empty());
  for (const QueryRow& r : rows) {
    for (int64_t h = 0; h < forward.nhead_q; ++h) {
      const double expected_lse = numeric::load(forward.lse, {r.view_batch, h, r.view_seq});
      const double actual_lse = numeric::load(split.combine.lse, {r.view_batch, h, r.view_seq});
      ASSERT_TRUE(
          within_one_ulp(DType::fp32, actual_lse, expected_lse, ulp_of(DType::fp32, expected_lse)))
          << "LSE b=" << r.b << " i=" << r.i;
      for (int64_t d = 0; d < forward.hdim_v; ++d) {
        const double expected = numeric::load(forward.o, {r.view_batch, r.view_seq, h, d});
        const double actual = numeric::load(split.combine.o, {r.view_batch, r.view_seq, h, d});
        ASSERT_TRUE(within_one_ulp(forward.out_dtype, actual, expected, split_slack(expected_lse)))
            << "b=" << r.b << " i=" << r.i << " h=" << h << " d=" << d;
      }
      // Every partial was written, and none is NaN.
      for (int64_t s = 0; s < num_splits; ++s)
        ASSERT_FALSE(std::isnan(
            numeric::load(split.partials.split.lse_acc, {s, r.view_batch, h, r.view_seq})));
    }
  }
}

TEST(ReferenceSplitKv, CombineEqualsForwardBatchMode) {
  // 300 keys: chunks of 128 give three real splits; 4 and 8 splits leave empty ones.
  const Dims d{2, 4, 2, 20, 300, 32, 32};
  for (const int64_t splits : {1, 2, 3, 4, 8}) {
    TensorPool pool(100 + splits);
    const TensorView sinks = pool.uniform(DType::fp32, {d.nhead_q}, -1, 2);
    expect_split_equals_forward(pool,
                                batch_problem(pool, Family::fwd, DType::bf16, d)
                                    .causal(MaskAlign::bottom_right)
                                    .sink_logits(sinks)
                                    .build(),
                                splits);
  }
}

TEST(ReferenceSplitKv, CombineEqualsForwardTopLeftCausalFp32) {
  // Top-left causal: the first queries see nothing of the later splits (fully masked splits).
  const Dims d{1, 2, 2, 140, 280, 32, 32};
  for (const int64_t splits : {2, 3}) {
    TensorPool pool(110 + splits);
    expect_split_equals_forward(
        pool, batch_problem(pool, Family::fwd, DType::fp32, d).causal().build(), splits);
  }
}

TEST(ReferenceSplitKv, CombineEqualsForwardGroupMode) {
  for (const int64_t splits : {1, 3, 5}) {
    TensorPool pool(120 + splits);
    const TensorView sinks = pool.uniform(DType::fp32, {4}, -1, 2);
    // Key lengths 0, 130, 300, 5; query lengths 3, 0, 10, 4.
    expect_split_equals_forward(pool,
                                group_problem(pool, Family::fwd, DType::fp32, {0, 3, 3, 13, 17},
                                              {0, 0, 130, 430, 435}, 4, 1, 32, 64)
                                    .causal(MaskAlign::bottom_right)
                                    .sink_logits(sinks)
                                    .build(),
                                splits);
  }
}

TEST(ReferenceSplitKv, CombineEqualsForwardWithDropout) {
  const Dims d{1, 2, 2, 9, 260, 32, 32};
  TensorPool pool(130);
  expect_split_equals_forward(
      pool, batch_problem(pool, Family::fwd, DType::fp32, d).dropout(0.3, 77, 5).build(), 3);
}

TEST(ReferenceSplitKv, PartialsExcludeTheSinkLogit) {
  // One split with a sink logit must equal the forward without one (fp32 partials).
  const Dims d{2, 2, 2, 7, 50, 32, 32};
  TensorPool pool(140);
  const Problem plain = batch_problem(pool, Family::fwd, DType::fp32, d).causal().build();
  Problem with_sink = plain;
  with_sink.sink_logits = pool.uniform(DType::fp32, {d.nhead_q}, 1, 3);
  const SplitProblems split = make_split(pool, with_sink, 1);
  reference::forward(plain);
  reference::forward_splitkv(split.partials);
  for (const QueryRow& r : query_rows(plain)) {
    for (int64_t h = 0; h < d.nhead_q; ++h) {
      for (int64_t dv = 0; dv < d.hdim_v; ++dv)
        ASSERT_TRUE(within_one_ulp(DType::fp32,
                                   numeric::load(split.partials.split.o_acc, {0, r.b, h, r.i, dv}),
                                   numeric::load(plain.o, {r.b, r.i, h, dv})));
      ASSERT_TRUE(within_one_ulp(DType::fp32,
                                 numeric::load(split.partials.split.lse_acc, {0, r.b, h, r.i}),
                                 numeric::load(plain.lse, {r.b, h, r.i})));
    }
  }
}

TEST(ReferenceSplitKv, EmptyAndMaskedSplitsAreZeroWithMinusInfLse) {
  // 200 keys in 4 splits: chunk 128, so splits 2 and 3 are empty; top-left causal with 10
  // queries also masks split 1 entirely.
  const Dims d{1, 2, 1, 10, 200, 32, 32};
  TensorPool pool(150);
  const Problem forward = batch_problem(pool, Family::fwd, DType::fp32, d).causal().build();
  const SplitProblems split = make_split(pool, forward, 4);
  reference::forward_splitkv(split.partials);
  for (int64_t h = 0; h < d.nhead_q; ++h) {
    for (int64_t i = 0; i < d.seqlen_q; ++i) {
      EXPECT_TRUE(std::isfinite(numeric::load(split.partials.split.lse_acc, {0, 0, h, i})));
      for (int64_t s = 1; s < 4; ++s) {
        EXPECT_EQ(numeric::load(split.partials.split.lse_acc, {s, 0, h, i}), -kInf);
        for (int64_t dv = 0; dv < d.hdim_v; ++dv)
          EXPECT_EQ(numeric::load(split.partials.split.o_acc, {s, 0, h, i, dv}), 0.0);
      }
    }
  }
}

TEST(ReferenceSplitKv, CombineOfNothingIsZeroOrSink) {
  // All partials -inf: O = 0 and LSE = -inf, or LSE = sink with a sink logit; no NaN even if
  // the partial outputs hold garbage.
  const Dims d{1, 2, 2, 3, 4, 32, 32};
  TensorPool pool(160);
  Problem forward = batch_problem(pool, Family::fwd, DType::fp32, d).build();
  for (const bool sink : {false, true}) {
    if (sink) forward.sink_logits = pool.uniform(DType::fp32, {d.nhead_q}, -1, 1);
    const SplitProblems split = make_split(pool, forward, 2);
    fill_logical(split.combine.split.lse_acc, -kInf);
    fill_logical(split.combine.split.o_acc, kUnwritten);
    reference::splitkv_combine(split.combine);
    for (int64_t h = 0; h < d.nhead_q; ++h) {
      for (int64_t i = 0; i < d.seqlen_q; ++i) {
        const double expected_lse = sink ? numeric::load(forward.sink_logits, {h}) : -kInf;
        EXPECT_EQ(numeric::load(split.combine.lse, {0, h, i}), expected_lse);
        for (int64_t dv = 0; dv < d.hdim_v; ++dv)
          EXPECT_EQ(numeric::load(split.combine.o, {0, i, h, dv}), 0.0);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Paged K/V

struct PagedCase {
  Family family;
  PageTableKind table;
  KvLayout layout;
  int64_t page_size;
  std::vector<int64_t> query_lengths;  // fwd_pagedkv: all equal (batch mode)
  std::vector<int64_t> key_lengths;
  bool fp8_per_page = false;

  std::string name() const {
    return std::string(to_string(family)) + "/" + std::string(to_string(table)) + "/" +
           std::string(to_string(layout)) + "/page" + std::to_string(page_size) +
           (fp8_per_page ? "/fp8" : "");
  }
};

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> starts{0};
  for (int64_t n : lengths) starts.push_back(starts.back() + n);
  return starts;
}

// Scale values with at most three significant bits: fp8 * scale is exact in fp32.
double short_scale(std::mt19937_64& rng) {
  return std::uniform_int_distribution<int>(2, 15)(rng) / 8.0;
}

// A paged problem and the contiguous group-mode problem holding the same keys and values.
void expect_paged_equals_contiguous(const PagedCase& c) {
  SCOPED_TRACE(c.name());
  constexpr int64_t nhead_q = 4, nhead_k = 2, hdim = 32;
  const int64_t batch = static_cast<int64_t>(c.key_lengths.size());
  const DType storage = c.fp8_per_page ? DType::fp8_e4m3 : DType::bf16;
  const DType contiguous_dtype = c.fp8_per_page ? DType::fp32 : DType::bf16;
  TensorPool pool(200 + c.page_size);
  std::mt19937_64& rng = pool.rng();

  // Pages in a shuffled order, plus spare pages nobody uses.
  std::vector<std::vector<int64_t>> pages_of(batch);
  int64_t num_pages = 3;
  for (int64_t b = 0; b < batch; ++b)
    num_pages += (c.key_lengths[b] + c.page_size - 1) / c.page_size;
  std::vector<int64_t> order(num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t next = 0, max_pages = 1;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t count = (c.key_lengths[b] + c.page_size - 1) / c.page_size;
    for (int64_t n = 0; n < count; ++n) pages_of[b].push_back(order[next++]);
    max_pages = std::max(max_pages, count);
  }

  // Caches filled with noise, logical [pages, page_size, nhead_k, hdim] in either layout.
  const auto make_cache = [&] {
    if (c.layout == KvLayout::nhd)
      return pool.uniform(storage, {num_pages, c.page_size, nhead_k, hdim}, -1, 1);
    TensorView view = pool.uniform(storage, {num_pages, nhead_k, c.page_size, hdim}, -1, 1);
    view.shape = {num_pages, c.page_size, nhead_k, hdim, 0};
    view.stride = {nhead_k * c.page_size * hdim, hdim, c.page_size * hdim, 1, 0};
    return view;
  };
  const TensorView k_cache = make_cache(), v_cache = make_cache();
  Fp8Scales scales;
  if (c.fp8_per_page) {
    scales.kind = Fp8ScaleKind::per_page;
    scales.q_descale = 0.5;
    scales.k_page = pool.filled(DType::fp32, {num_pages, nhead_k}, 0);
    scales.v_page = pool.filled(DType::fp32, {num_pages, nhead_k}, 0);
    for (int64_t page = 0; page < num_pages; ++page)
      for (int64_t hk = 0; hk < nhead_k; ++hk) {
        numeric::store(scales.k_page, {page, hk}, short_scale(rng));
        numeric::store(scales.v_page, {page, hk}, short_scale(rng));
      }
  }

  // Contiguous K/V: the cache contents token by token, dequantized for fp8.
  const std::vector<int64_t> seqstart_q = prefix_sums(c.query_lengths);
  const std::vector<int64_t> seqstart_k = prefix_sums(c.key_lengths);
  const int64_t total_q = seqstart_q.back(), total_k = seqstart_k.back();
  const TensorView k = pool.filled(contiguous_dtype, {1, total_k, nhead_k, hdim}, 0);
  const TensorView v = pool.filled(contiguous_dtype, {1, total_k, nhead_k, hdim}, 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < c.key_lengths[b]; ++j) {
      const int64_t page = pages_of[b][j / c.page_size], slot = j % c.page_size;
      for (int64_t hk = 0; hk < nhead_k; ++hk)
        for (int64_t d = 0; d < hdim; ++d) {
          const double k_scale = c.fp8_per_page ? numeric::load(scales.k_page, {page, hk}) : 1;
          const double v_scale = c.fp8_per_page ? numeric::load(scales.v_page, {page, hk}) : 1;
          numeric::store(k, {0, seqstart_k[b] + j, hk, d},
                         numeric::load(k_cache, {page, slot, hk, d}) * k_scale);
          numeric::store(v, {0, seqstart_k[b] + j, hk, d},
                         numeric::load(v_cache, {page, slot, hk, d}) * v_scale);
        }
    }
  const TensorView q_stored = pool.uniform(storage, {1, total_q, nhead_q, hdim}, -1, 1);
  TensorView q = q_stored;
  if (c.fp8_per_page) {
    q = pool.filled(DType::fp32, {1, total_q, nhead_q, hdim}, 0);
    for (int64_t t = 0; t < total_q; ++t)
      for (int64_t h = 0; h < nhead_q; ++h)
        for (int64_t d = 0; d < hdim; ++d)
          numeric::store(q, {0, t, h, d}, numeric::load(q_stored, {0, t, h, d}) * 0.5);
  }
  const TensorView alibi = pool.uniform(DType::fp32, {nhead_q}, 0.01, 0.2);

  const Problem contiguous =
      ProblemBuilder(Family::fwd)
          .dtype(contiguous_dtype)
          .shape(1, nhead_q, nhead_k, 0, 0, hdim, hdim)
          .group(seqstart_q, seqstart_k)
          .causal(MaskAlign::bottom_right)
          .alibi(alibi)
          .q(q)
          .k(k)
          .v(v)
          .o(pool.filled(contiguous_dtype, {1, total_q, nhead_q, hdim}, kUnwritten))
          .lse(pool.filled(DType::fp32, {1, nhead_q, total_q}, kUnwritten))
          .build();

  PagedKv paged;
  paged.table = c.table;
  paged.layout = c.layout;
  paged.page_size = c.page_size;
  paged.num_pages = num_pages;
  if (c.table == PageTableKind::vllm_block_table) {
    paged.max_pages_per_seq = max_pages;
    paged.block_table.assign(batch * max_pages, 0);
    for (int64_t b = 0; b < batch; ++b)
      for (size_t n = 0; n < pages_of[b].size(); ++n)
        paged.block_table[b * max_pages + n] = static_cast<int32_t>(pages_of[b][n]);
  } else {
    paged.page_indptr = {0};
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t page : pages_of[b]) paged.page_indices.push_back(static_cast<int32_t>(page));
      paged.page_indptr.push_back(static_cast<int64_t>(paged.page_indices.size()));
    }
  }
  const int64_t max_keys = *std::max_element(c.key_lengths.begin(), c.key_lengths.end());
  const DType out_dtype = contiguous_dtype;
  ProblemBuilder builder(c.family);
  builder.dtype(storage).out_dtype(out_dtype).causal(MaskAlign::bottom_right).alibi(alibi);
  const bool batch_mode = c.family == Family::fwd_pagedkv;
  if (batch_mode) {
    const int64_t sq = c.query_lengths.front();
    // Batch-mode queries are the same memory seen as [batch, sq, heads, dim].
    TensorView q_batch = q_stored;
    q_batch.shape = {batch, sq, nhead_q, hdim, 0};
    q_batch.stride = {sq * nhead_q * hdim, nhead_q * hdim, hdim, 1, 0};
    builder.shape(batch, nhead_q, nhead_k, sq, max_keys, hdim, hdim)
        .q(q_batch)
        .o(pool.filled(out_dtype, {batch, sq, nhead_q, hdim}, kUnwritten))
        .lse(pool.filled(DType::fp32, {batch, nhead_q, sq}, kUnwritten));
  } else {
    builder.shape(1, nhead_q, nhead_k, 0, 0, hdim, hdim)
        .group(seqstart_q, {})
        .q(q_stored)
        .o(pool.filled(out_dtype, {1, total_q, nhead_q, hdim}, kUnwritten))
        .lse(pool.filled(DType::fp32, {1, nhead_q, total_q}, kUnwritten));
  }
  const Problem problem = builder.key_lengths(c.key_lengths)
                              .k(k_cache)
                              .v(v_cache)
                              .paged(paged)
                              .fp8_scales(scales)
                              .build();

  reference::forward(contiguous);
  reference::forward(problem);
  int64_t compared = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < c.query_lengths[b]; ++i)
      for (int64_t h = 0; h < nhead_q; ++h) {
        const int64_t token = seqstart_q[b] + i;
        const int64_t view_batch = batch_mode ? b : 0, view_seq = batch_mode ? i : token;
        for (int64_t d = 0; d < hdim; ++d, ++compared) {
          const double expected = numeric::load(contiguous.o, {0, token, h, d});
          ASSERT_FALSE(std::isnan(expected));
          // Same doubles in the same order: bit-identical.
          ASSERT_EQ(numeric::load(problem.o, {view_batch, view_seq, h, d}), expected)
              << "b=" << b << " i=" << i << " h=" << h << " d=" << d;
        }
        ASSERT_EQ(numeric::load(problem.lse, {view_batch, h, view_seq}),
                  numeric::load(contiguous.lse, {0, h, token}));
      }
  EXPECT_GT(compared, 0);
}

TEST(ReferencePaged, DecodeEqualsContiguous) {
  for (const PageTableKind table :
       {PageTableKind::vllm_block_table, PageTableKind::sglang_page_list})
    for (const KvLayout layout : {KvLayout::nhd, KvLayout::hnd})
      for (const int64_t page : {1, 16, 128})
        expect_paged_equals_contiguous(
            {Family::fwd_pagedkv, table, layout, page, {1, 1, 1, 1}, {37, 1, 150, 17}});
}

TEST(ReferencePaged, MultiQueryPagedKvEqualsContiguous) {
  for (const KvLayout layout : {KvLayout::nhd, KvLayout::hnd})
    expect_paged_equals_contiguous({Family::fwd_pagedkv,
                                    PageTableKind::vllm_block_table,
                                    layout,
                                    16,
                                    {4, 4, 4},
                                    {37, 4, 150}});
}

TEST(ReferencePaged, BatchPrefillEqualsContiguous) {
  for (const PageTableKind table :
       {PageTableKind::vllm_block_table, PageTableKind::sglang_page_list})
    for (const KvLayout layout : {KvLayout::nhd, KvLayout::hnd})
      for (const int64_t page : {1, 16, 128})
        expect_paged_equals_contiguous(
            {Family::batch_prefill, table, layout, page, {5, 0, 12, 3}, {37, 0, 150, 17}});
}

TEST(ReferencePaged, LargePagesEqualContiguous) {
  expect_paged_equals_contiguous({Family::batch_prefill,
                                  PageTableKind::sglang_page_list,
                                  KvLayout::hnd,
                                  1024,
                                  {3, 2},
                                  {1100, 300}});
  expect_paged_equals_contiguous({Family::fwd_pagedkv,
                                  PageTableKind::vllm_block_table,
                                  KvLayout::nhd,
                                  1024,
                                  {1, 1},
                                  {1100, 300}});
}

TEST(ReferencePaged, PerPageFp8ScalesEqualDequantizedContiguous) {
  expect_paged_equals_contiguous({Family::fwd_pagedkv,
                                  PageTableKind::vllm_block_table,
                                  KvLayout::hnd,
                                  16,
                                  {1, 1, 1},
                                  {40, 7, 100},
                                  true});
  expect_paged_equals_contiguous({Family::batch_prefill,
                                  PageTableKind::sglang_page_list,
                                  KvLayout::nhd,
                                  16,
                                  {6, 2, 9},
                                  {40, 7, 100},
                                  true});
}

}  // namespace
