// Shared pieces of the CPU reference: dequantized gathers of Q/K/V rows and the exact logit
// (scale, soft cap, bias, ALiBi, mask) of one (query, key) pair. Forward, split-KV, paged,
// batch prefill and backward all go through these, so they agree by construction.
#pragma once

#include <cstdint>
#include <vector>

#include "tilefmha/problem.hpp"

namespace tilefmha::reference::detail {

// Row-major [length, dim] doubles of one sequence and head.
struct Rows {
  int64_t length = 0;
  int64_t dim = 0;
  std::vector<double> values;
  const double* row(int64_t index) const { return values.data() + index * dim; }
};

// Q rows of sequence b, query head h, dequantized (fp8 scales applied).
Rows gather_q(const Problem& problem, int64_t b, int64_t h);
// K / V rows of sequence b, KV head hk: contiguous or through the page table, dequantized.
Rows gather_k(const Problem& problem, int64_t b, int64_t hk);
Rows gather_v(const Problem& problem, int64_t b, int64_t hk);

// The KV head serving query head h (GQA/MQA).
inline int64_t kv_head(const Problem& problem, int64_t h) {
  return h / (problem.nhead_q / problem.nhead_k);
}

// Whether key j is visible to query i of sequence b (mask, window, sink tokens); i and j local.
bool visible(const Problem& problem, int64_t b, int64_t i, int64_t j);

// The logit of a visible pair from the raw dot product q.k:
//   s = scale * dot;  s = cap * tanh(s / cap) when soft-capped;  s += bias or ALiBi.
// d_dot is ds/d(dot), which backward needs.
struct Logit {
  double value;
  double d_dot;
};
Logit logit(const Problem& problem, int64_t b, int64_t h, int64_t i, int64_t j, double dot);

// Per-head sink logit (enters only the softmax denominator); nullopt-like flag when absent.
bool has_sink_logit(const Problem& problem);
double sink_logit(const Problem& problem, int64_t h);

// Dropout of element (b, h, i, j): 0 when dropped, 1 / (1 - p) when kept (1 without dropout).
double dropout_factor(const Problem& problem, int64_t b, int64_t h, int64_t i, int64_t j);

// Element offset of the bias element of (b, h, i, j) in problem.bias.
int64_t bias_offset(const Problem& problem, int64_t b, int64_t h, int64_t i, int64_t j);

// View index of query row i of sequence b: {batch index, seq index} in the Q/O views.
struct RowIndex {
  int64_t batch;
  int64_t seq;
};
RowIndex query_row(const Problem& problem, int64_t b, int64_t i);
// Same for a contiguous K/V view (not paged).
RowIndex key_row(const Problem& problem, int64_t b, int64_t j);
// LSE-like [batch, head, seq] views: group mode uses batch 0 and the global token index.
int64_t lse_offset(const Problem& problem, const TensorView& view, int64_t b, int64_t h, int64_t i);

}  // namespace tilefmha::reference::detail
