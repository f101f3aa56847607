// Shared pieces of the backward reference: the per-head row data backward reads and the
// softmax gradient of one (query, key) pair. dQ/dK/dV and dBias both go through
// pair_gradient, so the two passes agree by construction.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "reference/access.hpp"

namespace tilefmha::reference::detail {

// Throws unless backward can run on this problem: fp8 inputs and paged caches are not
// supported by backward; every view the family `stage` reads or writes must be set.
void require_backward_supported(const Problem& problem, Family stage);

// What backward needs of query head h of sequence b: Q and dO rows, LSE and D per row.
struct QueryHeadRows {
  Rows q;
  Rows d_o;
  std::vector<double> lse;
  std::vector<double> d;  // rowsum(dO * O), from bwd.d
};
QueryHeadRows gather_query_head(const Problem& problem, int64_t b, int64_t h);

// Rows of an O-like view ([batch, seq, head, dim], query rows of sequence b, head h).
Rows gather_query_rows(const Problem& problem, const TensorView& view, int64_t dim, int64_t b,
                       int64_t h);

// Gradient pieces of a visible pair (i, j):
//   P = exp(s - LSE) (0 when the row is fully masked), Z = dropout factor,
//   dP = Z * dO_i.v_j,  dS = P (dP - D_i),  g = dS * ds/d(dot).
struct PairGradient {
  double p_kept;  // P * Z: the weight of dO_i in dV_j
  double ds;      // dL/ds: the dBias contribution
  double g;       // dL/d(q_i.k_j): the weight of k_j in dQ_i and of q_i in dK_j
};
PairGradient pair_gradient(const Problem& problem, int64_t b, int64_t h, int64_t i, int64_t j,
                           const QueryHeadRows& rows, const double* k_row, const double* v_row);

}  // namespace tilefmha::reference::detail
