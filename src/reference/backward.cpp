// bwd_dot_do_o, bwd_convert_dq and the three backward stages in order. bwd_dq_dk_dv lives in
// backward_dq_dk_dv.cpp.
#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "reference/backward_pair.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::reference {

void backward_dot_do_o(const Problem& problem) {
  validate(problem);
  detail::require_backward_supported(problem, Family::bwd_dot_do_o);
  const Problem& p = problem;
  parallel_for(p.batch * p.nhead_q, [&](int64_t task) {
    const int64_t b = task / p.nhead_q;
    const int64_t h = task % p.nhead_q;
    const detail::Rows o = detail::gather_query_rows(p, p.o, p.hdim_v, b, h);
    const detail::Rows d_o = detail::gather_query_rows(p, p.bwd.d_o, p.hdim_v, b, h);
    for (int64_t i = 0; i < o.length; ++i) {
      double sum = 0.0;
      for (int64_t d = 0; d < p.hdim_v; ++d) sum += o.row(i)[d] * d_o.row(i)[d];
      numeric::store(p.bwd.d.data, p.bwd.d.dtype, detail::lse_offset(p, p.bwd.d, b, h, i), sum);
    }
  });
}

void backward_convert_dq(const Problem& problem) {
  validate(problem);
  detail::require_backward_supported(problem, Family::bwd_convert_dq);
  const Problem& p = problem;
  const TensorView& acc = p.bwd.dq_acc;
  const TensorView& dq = p.bwd.dq;
  parallel_for(p.batch * p.nhead_q, [&](int64_t task) {
    const int64_t b = task / p.nhead_q;
    const int64_t h = task % p.nhead_q;
    for (int64_t i = 0; i < p.query_length(b); ++i) {
      const detail::RowIndex row = detail::query_row(p, b, i);
      const int64_t from = acc.offset({row.batch, row.seq, h, 0});
      const int64_t to = dq.offset({row.batch, row.seq, h, 0});
      for (int64_t d = 0; d < p.hdim_q; ++d)
        numeric::store(dq.data, dq.dtype, to + d * dq.stride[3],
                       numeric::load(acc.data, acc.dtype, from + d * acc.stride[3]));
    }
  });
}

void backward(const Problem& problem) {
  // Each stage validates the problem as its own family, as a three-stage plan would, and all
  // three are validated before the first runs: a problem the last stage refuses (no dq, say)
  // used to have D, dk and dv written before the error.
  // dSink belongs to the whole backward (bwd_dq_dk_dv), which the row stages' families refuse.
  auto as_stage = [&](Family family) {
    Problem stage = problem;
    stage.family = family;
    if (family != Family::bwd_dq_dk_dv) stage.bwd.dsink = {};
    return stage;
  };
  for (const Family family : {Family::bwd_dot_do_o, Family::bwd_dq_dk_dv, Family::bwd_convert_dq}) {
    const Problem stage = as_stage(family);
    validate(stage);
    detail::require_backward_supported(stage, family);
  }
  backward_dot_do_o(as_stage(Family::bwd_dot_do_o));
  backward_dq_dk_dv(as_stage(Family::bwd_dq_dk_dv));
  backward_convert_dq(as_stage(Family::bwd_convert_dq));
}

}  // namespace tilefmha::reference
