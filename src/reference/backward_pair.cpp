#include "reference/backward_pair.hpp"

#include <cmath>
#include <string>

#include "core/numeric.hpp"
#include "reference/dot.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::reference::detail {
namespace {

void require_view(const TensorView& view, std::string_view field, Family stage) {
  if (view.empty())
    throw Error(ErrorKind::invalid_problem, std::string(field) + " is not set (needed by " +
                                                std::string(to_string(stage)) + ")");
  if (view.space != MemorySpace::host)
    throw Error(ErrorKind::invalid_problem, std::string(field) +
                                                " is in device memory; the CPU reference needs "
                                                "host memory");
}

}  // namespace

void require_backward_supported(const Problem& p, Family stage) {
  // Gradients of fp8 inputs would need a choice of which scale the gradient refers to
  // (stored or dequantized value); backward of fp8 inputs is not a supported feature.
  if (is_fp8(p.dtype))
    throw Error(ErrorKind::not_supported, "backward of fp8 inputs is not supported (dtype = " +
                                              std::string(to_string(p.dtype)) + ")");
  if (p.is_paged())
    throw Error(ErrorKind::not_supported,
                "backward through a paged KV cache is not supported (paged.table = " +
                    std::string(to_string(p.paged.table)) + ")");
  switch (stage) {
    case Family::bwd_dot_do_o:
      require_view(p.o, "o", stage);
      require_view(p.bwd.d_o, "bwd.d_o", stage);
      require_view(p.bwd.d, "bwd.d", stage);
      break;
    case Family::bwd_dq_dk_dv:
      require_view(p.q, "q", stage);
      require_view(p.k, "k", stage);
      require_view(p.v, "v", stage);
      require_view(p.lse, "lse", stage);
      require_view(p.bwd.d_o, "bwd.d_o", stage);
      require_view(p.bwd.d, "bwd.d", stage);
      require_view(p.bwd.dq_acc, "bwd.dq_acc", stage);
      require_view(p.bwd.dk, "bwd.dk", stage);
      require_view(p.bwd.dv, "bwd.dv", stage);
      if (!p.bwd.dsink.empty()) require_view(p.bwd.dsink, "bwd.dsink", stage);
      if (!p.bwd.dbias.empty() && p.bias_kind != BiasKind::elementwise)
        throw Error(ErrorKind::invalid_problem,
                    "bwd.dbias is set but bias_kind = " + std::string(to_string(p.bias_kind)) +
                        " (dBias exists only for an elementwise bias)");
      break;
    case Family::bwd_convert_dq:
      require_view(p.bwd.dq_acc, "bwd.dq_acc", stage);
      require_view(p.bwd.dq, "bwd.dq", stage);
      break;
    default:
      throw Error(ErrorKind::invalid_argument,
                  "not a backward family: " + std::string(to_string(stage)));
  }
}

Rows gather_query_rows(const Problem& p, const TensorView& view, int64_t dim, int64_t b,
                       int64_t h) {
  Rows rows;
  rows.length = p.query_length(b);
  rows.dim = dim;
  rows.values.resize(rows.length * dim);
  for (int64_t i = 0; i < rows.length; ++i) {
    const RowIndex row = query_row(p, b, i);
    const int64_t base = view.offset({row.batch, row.seq, h, 0});
    for (int64_t d = 0; d < dim; ++d)
      rows.values[i * dim + d] = numeric::load(view.data, view.dtype, base + d * view.stride[3]);
  }
  return rows;
}

QueryHeadRows gather_query_head(const Problem& p, int64_t b, int64_t h) {
  QueryHeadRows rows;
  rows.q = gather_q(p, b, h);
  rows.d_o = gather_query_rows(p, p.bwd.d_o, p.hdim_v, b, h);
  const int64_t length = p.query_length(b);
  rows.lse.resize(length);
  rows.d.resize(length);
  for (int64_t i = 0; i < length; ++i) {
    rows.lse[i] = numeric::load(p.lse.data, p.lse.dtype, lse_offset(p, p.lse, b, h, i));
    rows.d[i] = numeric::load(p.bwd.d.data, p.bwd.d.dtype, lse_offset(p, p.bwd.d, b, h, i));
  }
  return rows;
}

PairGradient pair_gradient(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j,
                           const QueryHeadRows& rows, const double* k_row, const double* v_row) {
  const double lse = rows.lse[i];
  // A fully masked row has LSE = -inf and contributes nothing (forward wrote O = 0).
  if (std::isinf(lse) && lse < 0) return {0.0, 0.0, 0.0};
  const Logit s = logit(p, b, h, i, j, dot(rows.q.row(i), k_row, p.hdim_q));
  const double prob = std::exp(s.value - lse);
  const double keep = dropout_factor(p, b, h, i, j);
  const double dp = keep * dot(rows.d_o.row(i), v_row, p.hdim_v);
  const double ds = prob * (dp - rows.d[i]);
  return {prob * keep, ds, ds * s.d_dot};
}

}  // namespace tilefmha::reference::detail
