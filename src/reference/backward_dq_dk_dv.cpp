// bwd_dq_dk_dv: dQ (into the fp32 accumulator), dK, dV, dBias and dSink.
//
// Two passes over the same pair gradients, so that no two tasks write one element and the
// work still spreads over every core when there are few KV heads (MQA, batch 1):
//  * dQ: one task per (batch, query head) owns its dQ rows;
//  * dK/dV: one task per (batch, KV head, block of keys) owns those rows and sums over every
//    query head of the group and every query.
// Within a task every sum runs in a fixed order, so repeated runs are bitwise identical
// whatever the thread count: deterministic mode needs nothing more.
#include <algorithm>
#include <vector>

#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "reference/backward_dbias.hpp"
#include "reference/backward_dsink.hpp"
#include "reference/backward_pair.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::reference {
namespace {

using detail::Rows;

// Keys per dK/dV task: enough work per task to amortize gathering the group's query rows.
constexpr int64_t kKeysPerTask = 32;

void add_scaled(double* target, const double* source, double weight, int64_t n) {
  for (int64_t d = 0; d < n; ++d) target[d] += weight * source[d];
}

void store_row(const TensorView& view, int64_t base, const double* values, int64_t n) {
  for (int64_t d = 0; d < n; ++d)
    numeric::store(view.data, view.dtype, base + d * view.stride[3], values[d]);
}

// dK/dV rows written for sequence b: its keys, and in batch mode also the rows up to seqlen_k
// past a shorter key_length (they get 0: no gradient).
int64_t key_rows_written(const Problem& p, int64_t b) {
  return p.mode == Mode::batch ? std::max(p.seqlen_k, p.key_length(b)) : p.key_length(b);
}

void query_head_dq(const Problem& p, int64_t b, int64_t h) {
  const detail::QueryHeadRows rows = detail::gather_query_head(p, b, h);
  const Rows k = detail::gather_k(p, b, detail::kv_head(p, h));
  const Rows v = detail::gather_v(p, b, detail::kv_head(p, h));
  std::vector<double> dq(p.hdim_q);
  for (int64_t i = 0; i < rows.q.length; ++i) {
    dq.assign(p.hdim_q, 0.0);
    for (int64_t j = 0; j < k.length; ++j) {
      if (!detail::visible(p, b, i, j)) continue;
      const detail::PairGradient grad =
          detail::pair_gradient(p, b, h, i, j, rows, k.row(j), v.row(j));
      add_scaled(dq.data(), k.row(j), grad.g, p.hdim_q);
    }
    const detail::RowIndex row = detail::query_row(p, b, i);
    const TensorView& acc = p.bwd.dq_acc;
    store_row(acc, acc.offset({row.batch, row.seq, h, 0}), dq.data(), p.hdim_q);
  }
}

void key_block_dk_dv(const Problem& p, int64_t b, int64_t hk, int64_t key_begin) {
  const int64_t written_end = std::min(key_begin + kKeysPerTask, key_rows_written(p, b));
  if (key_begin >= written_end) return;
  const Rows k = detail::gather_k(p, b, hk);
  const Rows v = detail::gather_v(p, b, hk);
  const int64_t key_end = std::min(written_end, k.length);  // keys that can have a gradient
  const int64_t count = written_end - key_begin;
  std::vector<double> dk(count * p.hdim_q, 0.0);
  std::vector<double> dv(count * p.hdim_v, 0.0);
  const int64_t group = p.nhead_q / p.nhead_k;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const detail::QueryHeadRows rows = detail::gather_query_head(p, b, h);
    for (int64_t i = 0; i < rows.q.length; ++i) {
      for (int64_t j = key_begin; j < key_end; ++j) {
        if (!detail::visible(p, b, i, j)) continue;
        const detail::PairGradient grad =
            detail::pair_gradient(p, b, h, i, j, rows, k.row(j), v.row(j));
        const int64_t local = j - key_begin;
        add_scaled(dv.data() + local * p.hdim_v, rows.d_o.row(i), grad.p_kept, p.hdim_v);
        add_scaled(dk.data() + local * p.hdim_q, rows.q.row(i), grad.g, p.hdim_q);
      }
    }
  }
  for (int64_t j = key_begin; j < written_end; ++j) {
    const detail::RowIndex row = detail::key_row(p, b, j);
    const int64_t local = j - key_begin;
    store_row(p.bwd.dk, p.bwd.dk.offset({row.batch, row.seq, hk, 0}), dk.data() + local * p.hdim_q,
              p.hdim_q);
    store_row(p.bwd.dv, p.bwd.dv.offset({row.batch, row.seq, hk, 0}), dv.data() + local * p.hdim_v,
              p.hdim_v);
  }
}

}  // namespace

void backward_dq_dk_dv(const Problem& problem) {
  validate(problem);
  detail::require_backward_supported(problem, Family::bwd_dq_dk_dv);
  const Problem& p = problem;
  parallel_for(p.batch * p.nhead_q,
               [&](int64_t task) { query_head_dq(p, task / p.nhead_q, task % p.nhead_q); });

  int64_t longest = 0;
  for (int64_t b = 0; b < p.batch; ++b) longest = std::max(longest, key_rows_written(p, b));
  const int64_t blocks = (longest + kKeysPerTask - 1) / kKeysPerTask;
  parallel_for(p.batch * p.nhead_k * blocks, [&](int64_t task) {
    const int64_t block = task % blocks;
    const int64_t head = task / blocks;
    key_block_dk_dv(p, head / p.nhead_k, head % p.nhead_k, block * kKeysPerTask);
  });

  if (!p.bwd.dbias.empty()) detail::write_dbias(p);
  if (!p.bwd.dsink.empty()) detail::write_dsink(p);
}

}  // namespace tilefmha::reference
