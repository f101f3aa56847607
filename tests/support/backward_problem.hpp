// Test support: the shape of a backward problem (no tensors), for the codegen tests' launch-shape
// and launch-form checks.
#pragma once

#include <cstdint>

#include "tilefmha/problem.hpp"

namespace tilefmha::testing {

inline Problem backward_problem(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_q,
                                int64_t seqlen_k, int64_t hdim) {
  Problem p;
  p.family = Family::bwd_dq_dk_dv;
  p.batch = batch;
  p.nhead_q = nhead_q;
  p.nhead_k = nhead_k;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.hdim_q = p.hdim_v = hdim;
  return p;
}

}  // namespace tilefmha::testing
