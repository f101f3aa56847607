// Problem + split partials -> CombineParams of the split-KV combine kernel
// (kernels/fmha/combine_params.h).
#pragma once

#include "fmha/combine_params.h"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Validates the problem, then binds its O, LSE (when return_lse) and sink logit (when present)
// and the partials of `split` (the problem's own for family fwd_splitkv_combine, or a plan
// workspace's for the combine stage of a split forward problem). Throws Error naming the field
// and value unless:
//   * the family writes O: fwd, fwd_splitkv_combine, fwd_pagedkv or batch_prefill;
//   * every bound view is in device memory with a contiguous last dim;
//   * O is fp32, fp16 or bf16; LSE and the sink logits fp32;
//   * split.num_splits >= 1; split.o_acc is fp32, fp16 or bf16 of shape [num_splits, rows batch,
//     nhead_q, rows seq, hdim_v] and split.lse_acc fp32 [num_splits, rows batch, nhead_q,
//     rows seq], where rows are (batch, seqlen_q), or (1, total tokens) in group mode.
fmha::CombineParams make_combine_params(const Problem& problem, const SplitKv& split);

}  // namespace tilefmha::runtime
