// Test support: well-formed forward problems (every tensor the family needs, of the right shape)
// with random inputs, for the forward, split-KV, paged and dropout tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::testing {

struct Dims {
  int64_t batch = 2, nhead_q = 2, nhead_k = 2, seqlen_q = 8, seqlen_k = 8, hdim_q = 32, hdim_v = 32;
};

inline constexpr double kUnwritten = std::numeric_limits<double>::quiet_NaN();

// Every logical element of a view set to `value` (padding untouched).
inline void fill_logical(const TensorView& view, double value) {
  for_each_element(
      view, [&](int64_t, int64_t offset) { numeric::store(view.data, view.dtype, offset, value); });
}

// Batch mode: random Q, K, V in `layout`; O (same layout) and LSE preset to NaN so that an
// element the reference forgets to write shows up.
inline ProblemBuilder batch_problem(TensorPool& pool, Family family, DType dtype, const Dims& d,
                                    QkvLayout layout = QkvLayout::bshd) {
  const DType out = default_out_dtype(dtype);
  TensorView o = pool.qkv(out, layout, d.batch, d.seqlen_q, d.nhead_q, d.hdim_v);
  fill_logical(o, kUnwritten);
  ProblemBuilder builder(family);
  builder.dtype(dtype)
      .shape(d.batch, d.nhead_q, d.nhead_k, d.seqlen_q, d.seqlen_k, d.hdim_q, d.hdim_v)
      .q(pool.qkv(dtype, layout, d.batch, d.seqlen_q, d.nhead_q, d.hdim_q))
      .k(pool.qkv(dtype, layout, d.batch, d.seqlen_k, d.nhead_k, d.hdim_q))
      .v(pool.qkv(dtype, layout, d.batch, d.seqlen_k, d.nhead_k, d.hdim_v))
      .o(o)
      .lse(pool.filled(DType::fp32, {d.batch, d.nhead_q, d.seqlen_q}, kUnwritten));
  return builder;
}

// Group mode over contiguous K/V: sequences from the prefix sums.
inline ProblemBuilder group_problem(TensorPool& pool, Family family, DType dtype,
                                    std::vector<int64_t> seqstart_q,
                                    std::vector<int64_t> seqstart_k, int64_t nhead_q,
                                    int64_t nhead_k, int64_t hdim_q, int64_t hdim_v) {
  const int64_t total_q = seqstart_q.back(), total_k = seqstart_k.back();
  const DType out = default_out_dtype(dtype);
  ProblemBuilder builder(family);
  builder.dtype(dtype)
      .shape(1, nhead_q, nhead_k, 0, 0, hdim_q, hdim_v)
      .group(std::move(seqstart_q), std::move(seqstart_k))
      .q(pool.uniform(dtype, {1, total_q, nhead_q, hdim_q}, -1, 1))
      .k(pool.uniform(dtype, {1, total_k, nhead_k, hdim_q}, -1, 1))
      .v(pool.uniform(dtype, {1, total_k, nhead_k, hdim_v}, -1, 1))
      .o(pool.filled(out, {1, total_q, nhead_q, hdim_v}, kUnwritten))
      .lse(pool.filled(DType::fp32, {1, nhead_q, total_q}, kUnwritten));
  return builder;
}

}  // namespace tilefmha::testing
