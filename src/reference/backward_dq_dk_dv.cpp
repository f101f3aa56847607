// bwd_dq_dk_dv: dQ (into the fp32 accumulator), dK, dV and dBias.
//
// One task per (batch, KV head) owns the dK/dV rows of that head and the dQ rows of every query
// head it serves, so tasks never write the same element. Within a task every sum runs in a
// fixed order, so repeated runs are bitwise identical: deterministic mode needs nothing more.
#include <vector>

#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "reference/backward_dbias.hpp"
#include "reference/backward_pair.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::reference {
namespace {

using detail::Rows;

void add_scaled(double* target, const double* source, double weight, int64_t n) {
  for (int64_t d = 0; d < n; ++d) target[d] += weight * source[d];
}

void store_row(const TensorView& view, int64_t base, const double* values, int64_t n) {
  for (int64_t d = 0; d < n; ++d)
    numeric::store(view.data, view.dtype, base + d * view.stride[3], values[d]);
}

// dK or dV rows of one KV head; batch-mode rows past the sequence's keys get 0 (no gradient).
void store_key_rows(const Problem& p, const TensorView& view, int64_t b, int64_t hk,
                    const std::vector<double>& values, int64_t dim) {
  const int64_t length = p.key_length(b);
  const int64_t rows = p.mode == Mode::batch ? p.seqlen_k : length;
  const std::vector<double> zeros(dim, 0.0);
  for (int64_t j = 0; j < rows; ++j) {
    const detail::RowIndex row = detail::key_row(p, b, j);
    const double* source = j < length ? values.data() + j * dim : zeros.data();
    store_row(view, view.offset({row.batch, row.seq, hk, 0}), source, dim);
  }
}

void kv_head_gradients(const Problem& p, int64_t b, int64_t hk) {
  const Rows k = detail::gather_k(p, b, hk);
  const Rows v = detail::gather_v(p, b, hk);
  std::vector<double> dk(k.length * p.hdim_q, 0.0);
  std::vector<double> dv(k.length * p.hdim_v, 0.0);
  std::vector<double> dq(p.hdim_q);
  const int64_t group = p.nhead_q / p.nhead_k;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const detail::QueryHeadRows rows = detail::gather_query_head(p, b, h);
    for (int64_t i = 0; i < rows.q.length; ++i) {
      dq.assign(p.hdim_q, 0.0);
      for (int64_t j = 0; j < k.length; ++j) {
        if (!detail::visible(p, b, i, j)) continue;
        const detail::PairGradient grad =
            detail::pair_gradient(p, b, h, i, j, rows, k.row(j), v.row(j));
        add_scaled(dv.data() + j * p.hdim_v, rows.d_o.row(i), grad.p_kept, p.hdim_v);
        add_scaled(dq.data(), k.row(j), grad.g, p.hdim_q);
        add_scaled(dk.data() + j * p.hdim_q, rows.q.row(i), grad.g, p.hdim_q);
      }
      const detail::RowIndex row = detail::query_row(p, b, i);
      const TensorView& acc = p.bwd.dq_acc;
      store_row(acc, acc.offset({row.batch, row.seq, h, 0}), dq.data(), p.hdim_q);
    }
  }
  store_key_rows(p, p.bwd.dk, b, hk, dk, p.hdim_q);
  store_key_rows(p, p.bwd.dv, b, hk, dv, p.hdim_v);
}

}  // namespace

void backward_dq_dk_dv(const Problem& problem) {
  validate(problem);
  detail::require_backward_supported(problem, Family::bwd_dq_dk_dv);
  parallel_for(problem.batch * problem.nhead_k, [&](int64_t task) {
    kv_head_gradients(problem, task / problem.nhead_k, task % problem.nhead_k);
  });
  if (!problem.bwd.dbias.empty()) detail::write_dbias(problem);
}

}  // namespace tilefmha::reference
