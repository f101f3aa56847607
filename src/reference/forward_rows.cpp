#include "reference/forward_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/philox.h"
#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "reference/dot.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::reference::detail {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

HeadRows gather_head(const Problem& problem, int64_t b, int64_t h) {
  const int64_t hk = kv_head(problem, h);
  return {gather_q(problem, b, h), gather_k(problem, b, hk), gather_v(problem, b, hk)};
}

RowAttention::RowAttention(const Problem& problem, int64_t b, int64_t h, const HeadRows& rows)
    : problem_(problem),
      b_(b),
      h_(h),
      rows_(rows),
      has_sink_(has_sink_logit(problem)),
      sink_(has_sink_ ? sink_logit(problem, h) : kNegInf) {
  keys_.reserve(rows.k.length);
  weights_.reserve(rows.k.length);
}

double RowAttention::attend(int64_t i, int64_t key_begin, int64_t key_end, bool with_sink,
                            double* out) {
  const int64_t dim_v = rows_.v.dim;
  std::fill(out, out + dim_v, 0.0);
  keys_.clear();
  weights_.clear();
  const bool sink = with_sink && has_sink_;
  double max_logit = sink ? sink_ : kNegInf;
  const double* q = rows_.q.row(i);
  for (int64_t j = key_begin; j < key_end; ++j) {
    if (!visible(problem_, b_, i, j)) continue;
    const double s = logit(problem_, b_, h_, i, j, dot(q, rows_.k.row(j), rows_.k.dim)).value;
    keys_.push_back(j);
    weights_.push_back(s);
    max_logit = max_keeping_nan(max_logit, s);
  }
  if (std::isnan(max_logit)) {
    std::fill(out, out + dim_v, std::numeric_limits<double>::quiet_NaN());
    return max_logit;
  }
  // No key and no sink (or only -inf logits): exp(-inf - -inf) would be NaN.
  if (max_logit == kNegInf) return kNegInf;

  double denominator = sink ? std::exp(sink_ - max_logit) : 0.0;
  for (double& w : weights_) {
    w = std::exp(w - max_logit);
    denominator += w;
  }
  for (size_t n = 0; n < keys_.size(); ++n) {
    const double weight = weights_[n] / denominator * dropout_factor(problem_, b_, h_, i, keys_[n]);
    if (weight == 0.0) continue;
    const double* v = rows_.v.row(keys_[n]);
    for (int64_t d = 0; d < dim_v; ++d) out[d] += weight * v[d];
  }
  return max_logit + std::log(denominator);
}

void store_output_row(const Problem& problem, int64_t b, int64_t h, int64_t i, const double* out,
                      double lse) {
  const RowIndex row = query_row(problem, b, i);
  const TensorView& o = problem.o;
  const int64_t base = o.offset({row.batch, row.seq, h, 0});
  const int64_t lse_at = problem.return_lse ? lse_offset(problem, problem.lse, b, h, i) : 0;
  // Problem::accumulate: merge with the state O and LSE hold (merge_states' rule; a state of
  // LSE -inf has no weight and its O is not read; NaN in either LSE reaches the row).
  double take = 1.0, keep = 0.0;
  if (problem.accumulate) {
    const double previous = numeric::load(problem.lse.data, problem.lse.dtype, lse_at);
    const double top = std::fmax(previous, lse);
    const double none = -std::numeric_limits<double>::infinity();
    const double previous_weight = previous == none ? 0.0 : std::exp(previous - top);
    const double new_weight = lse == none ? 0.0 : std::exp(lse - top);
    const double total = previous_weight + new_weight;
    const bool empty = top == none;
    keep = empty ? 0.0 : previous_weight / total;
    take = empty ? 0.0 : new_weight / total;
    lse = empty ? none : top + std::log(total);
  }
  for (int64_t d = 0; d < problem.hdim_v; ++d) {
    const int64_t at = base + d * o.stride[3];
    double value = take * out[d];
    if (keep != 0.0) value += keep * numeric::load(o.data, o.dtype, at);
    numeric::store(o.data, o.dtype, at, value);
  }
  if (problem.return_lse) numeric::store(problem.lse.data, problem.lse.dtype, lse_at, lse);
}

void parallel_over_heads(const Problem& problem, const HeadRowsTask& body) {
  const int64_t pairs = problem.batch * problem.nhead_q;
  if (pairs <= 0) return;
  // Twice the threads in tasks evens out causal rows of unequal cost; parts of fewer than
  // kMinRows rows would spend more on gathers than on attention.
  constexpr int64_t kMinRows = 16;
  const int64_t wanted = (2 * static_cast<int64_t>(worker_count()) + pairs - 1) / pairs;
  const int64_t parts =
      std::max<int64_t>(1, std::min(wanted, (problem.seqlen_q + kMinRows - 1) / kMinRows));
  parallel_for(pairs * parts, [&](int64_t task) {
    const int64_t pair = task / parts, part = task % parts;
    const int64_t b = pair / problem.nhead_q, h = pair % problem.nhead_q;
    const int64_t rows = problem.query_length(b);
    const int64_t begin = rows * part / parts, end = rows * (part + 1) / parts;
    if (begin < end) body(b, h, begin, end);
  });
}

void store_dropout_random_values(const Problem& problem, int64_t b, int64_t h, int64_t row_begin,
                                 int64_t row_end) {
  const TensorView& store = problem.dropout.random_values;
  if (store.empty()) return;
  const DropoutSpec& spec = problem.dropout;
  const int64_t keys = problem.key_length(b);
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t j = 0; j < keys; ++j) {
      const unsigned int word =
          philox::dropout_word(spec.seed, spec.offset, b, h, problem.nhead_q, i, j);
      numeric::store(store, {b, h, i, j}, static_cast<double>(word >> 24));
    }
  }
}

void require_host_view(const TensorView& view, const char* field) {
  // Validation accepts a null view with no elements (an empty tensor has nothing to point at),
  // and nothing is read from it or written to it.
  if (view.empty() && view.rank > 0 && view.numel() == 0) return;
  if (view.empty())
    throw Error(ErrorKind::invalid_problem,
                std::string("the CPU reference needs ") + field + " but it is not set");
  if (view.space != MemorySpace::host)
    throw Error(ErrorKind::invalid_problem, std::string("the CPU reference needs ") + field +
                                                " in host memory, but it is device memory");
}

}  // namespace tilefmha::reference::detail
