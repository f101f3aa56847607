// Merging attention states. Attention over the union of disjoint key sets is a weighted sum of
// the attentions over each set: with O_i normalized over set i and LSE_i its log-sum-exp,
//   LSE = log(sum_i exp(LSE_i)),  O = sum_i exp(LSE_i - LSE) * O_i.
// Split-KV's combine stage does exactly this; context-parallel attention merges the states that
// ranks computed over their shards of the keys the same way. A state with LSE = -inf (it saw no
// key) carries no weight and its O is never read, so it may hold anything; a row whose states
// are all -inf gets O = 0 and LSE = -inf.
#pragma once

#include "tilefmha/problem.hpp"

namespace tilefmha {

struct MergeStates {
  // n states: O [n, batch, seq, heads, dim] as a rank-5 view whose logical order is
  // [state, batch, head, seq, dim] (the split-KV partials' order; any strides, dim contiguous),
  // fp32, fp16 or bf16; LSE fp32 [n, batch, heads, seq] (natural log).
  TensorView o_states;
  TensorView lse_states;
  // The merged state: O [batch, seq, heads, dim] (fp32, fp16 or bf16) and, when set, LSE fp32
  // [batch, heads, seq].
  TensorView o;
  TensorView lse;
  // Optional per-head sink logit (fp32 [heads]) that joins the softmax denominator once.
  TensorView sink_logits;
};

// The fwd_splitkv_combine problem that performs the merge (validated): run it with
// reference::splitkv_combine on host views, or with Engine::run on device views.
Problem merge_states_problem(const MergeStates& states);

}  // namespace tilefmha
