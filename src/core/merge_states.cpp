#include "tilefmha/merge_states.hpp"

#include "tilefmha/error.hpp"

namespace tilefmha {

Problem merge_states_problem(const MergeStates& states) {
  const TensorView& o = states.o;
  if (states.o_states.rank != 5)
    throw Error(ErrorKind::invalid_problem,
                "o_states.rank = " + std::to_string(states.o_states.rank) +
                    ": merge_states takes [states, batch, heads, seq, dim]");
  if (o.rank != 4)
    throw Error(ErrorKind::invalid_problem, "o.rank = " + std::to_string(o.rank) +
                                                ": merge_states writes [batch, seq, heads, dim]");
  const int64_t states_count = states.o_states.shape[0];
  const int64_t batch = o.shape[0], seq = o.shape[1], heads = o.shape[2], dim = o.shape[3];
  ProblemBuilder builder(Family::fwd_splitkv_combine);
  // The combine reads no Q, K or V: the shape's key length is only a placeholder.
  builder.dtype(o.dtype).shape(batch, heads, heads, seq, seq, dim, dim).o(o);
  builder.splits(states_count, states.o_states, states.lse_states);
  if (!states.lse.empty()) builder.lse(states.lse);
  if (!states.sink_logits.empty()) builder.sink_logits(states.sink_logits);
  return builder.build();
}

}  // namespace tilefmha
