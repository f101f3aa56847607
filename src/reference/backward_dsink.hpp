// dSink: the gradient of the per-head sink logit, which joins every row's softmax denominator
// as a logit with no value row.
#pragma once

#include "tilefmha/problem.hpp"

namespace tilefmha::reference::detail {

// Writes bwd.dsink[h] = -sum over every sequence b and query row i of head h of
// exp(sink[h] - lse[b, h, i]) * D[b, h, i], in double. Derivation: the sink's probability is
// P_sink = exp(sink - lse) (LSE holds the sink), and it has no value row, so dP_sink = 0 and
// dsink = P_sink * (dP_sink - D). Rows whose LSE is -inf saw nothing and add nothing. Reads
// bwd.d, so it runs after bwd_dot_do_o.
void write_dsink(const Problem& problem);

}  // namespace tilefmha::reference::detail
