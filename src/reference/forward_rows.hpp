// The per-row softmax engine shared by forward and split-KV: the logits of one query row over a
// range of keys, their log-sum-exp and the normalized, dropout-weighted sum of V rows. Both
// families go through attend(), so a split-KV plan combined is the forward by construction.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "reference/access.hpp"

namespace tilefmha::reference::detail {

// max(a, b) that keeps a NaN from either side: std::max(-inf, NaN) returns -inf, which would
// turn a NaN logit (NaN in q, k or a descale) into a row that looks fully masked (O = 0,
// LSE = -inf) instead of propagating it to the row's O and LSE.
inline double max_keeping_nan(double a, double b) {
  return std::isnan(b) ? b : (a < b ? b : a);
}

// Q rows of sequence b and query head h, K and V rows of its KV head; gathered once per task.
struct HeadRows {
  Rows q, k, v;
};
HeadRows gather_head(const Problem& problem, int64_t b, int64_t h);

// Attention of the query rows of one (sequence, query head) over any range of keys. Owns the
// scratch of a row so that a task allocates once, not once per row.
class RowAttention {
 public:
  RowAttention(const Problem& problem, int64_t b, int64_t h, const HeadRows& rows);

  // Writes into out (hdim_v values) the output of query i over the visible keys of
  // [key_begin, key_end), softmax-normalized within that range (the sink logit joins the
  // denominator when with_sink and the problem has one) and dropout-weighted; returns the
  // natural log-sum-exp of the same logits. Nothing contributing: out = 0 and -inf. A NaN logit
  // among the visible keys makes out and the result NaN.
  double attend(int64_t i, int64_t key_begin, int64_t key_end, bool with_sink, double* out);

 private:
  const Problem& problem_;
  int64_t b_, h_;
  const HeadRows& rows_;
  bool has_sink_;
  double sink_;
  std::vector<int64_t> keys_;    // visible keys of the current row
  std::vector<double> weights_;  // their logits, then exp(logit - max)
};

// Calls body(b, h, row_begin, row_end) in parallel for every sequence b and query head h,
// covering query rows [0, query_length(b)). A pair's rows are split into several calls only
// when there are too few pairs to keep every thread busy (one long sequence, few heads); each
// call then gathers K/V again, which costs little next to the rows it serves.
using HeadRowsTask = std::function<void(int64_t b, int64_t h, int64_t row_begin, int64_t row_end)>;
void parallel_over_heads(const Problem& problem, const HeadRowsTask& body);

// Writes output row i of (b, h) through problem.o (rounded to its dtype) and, when
// problem.return_lse, its LSE.
void store_output_row(const Problem& problem, int64_t b, int64_t h, int64_t i, const double* out,
                      double lse);

// Stores the top byte of the dropout word of every (i, j), i in [row_begin, row_end), of
// sequence b, head h into problem.dropout.random_values (when set), masked or not.
void store_dropout_random_values(const Problem& problem, int64_t b, int64_t h, int64_t row_begin,
                                 int64_t row_end);

// Throws invalid_problem naming `field` unless the view is set and in host memory: the
// reference dereferences every view it is given. A null view with no elements passes.
void require_host_view(const TensorView& view, const char* field);

}  // namespace tilefmha::reference::detail
