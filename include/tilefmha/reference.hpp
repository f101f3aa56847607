// The CPU reference: exact (double-accumulated) results for all nine families, parallel over
// (batch, head) on every core. Every view must be in host memory. Each entry point validates
// the problem first and writes only the outputs its family defines.
#pragma once

#include "tilefmha/problem.hpp"

namespace tilefmha::reference {

// Dispatches on problem.family to one of the functions below.
void run(const Problem& problem);

// fwd, fwd_pagedkv, batch_prefill: O (and LSE when return_lse).
void forward(const Problem& problem);
// fwd_splitkv: split.o_acc and split.lse_acc partials.
void forward_splitkv(const Problem& problem);
// fwd_splitkv_combine: O (and LSE) from split.o_acc / split.lse_acc.
void splitkv_combine(const Problem& problem);
// fwd_appendkv: new K/V (RoPE'd) into the cache; Q rotated in place when rotate_q. Appends only:
// run() also attends afterwards when the problem sets O.
void append_kv(const Problem& problem);
// bwd_dot_do_o: bwd.d = rowsum(dO * O).
void backward_dot_do_o(const Problem& problem);
// bwd_dq_dk_dv: bwd.dq_acc (fp32), dK, dV, dBias and dSink (when set); reads bwd.d.
void backward_dq_dk_dv(const Problem& problem);
// bwd_convert_dq: bwd.dq from bwd.dq_acc.
void backward_convert_dq(const Problem& problem);
// The three backward stages in order (any bwd family problem with every tensor set).
void backward(const Problem& problem);

}  // namespace tilefmha::reference
