#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::reference {

void run(const Problem& problem) {
  // The reference walks sequences on the host; it cannot read lengths kept on the device.
  if (problem.device_indices.any())
    throw Error(ErrorKind::invalid_problem,
                "device_indices is set but the CPU reference needs the index arrays as host "
                "vectors (seqstart_q, seqstart_k, seqlen_k_per_batch)");
  switch (problem.family) {
    case Family::fwd:
    case Family::fwd_pagedkv:
    case Family::batch_prefill: return forward(problem);
    case Family::fwd_splitkv: return forward_splitkv(problem);
    case Family::fwd_splitkv_combine: return splitkv_combine(problem);
    case Family::fwd_appendkv:
      append_kv(problem);
      // With O set the problem also asks for the attention over the appended cache.
      if (appends_then_attends(problem)) forward(attention_after_append(problem));
      return;
    case Family::bwd_dot_do_o: return backward_dot_do_o(problem);
    case Family::bwd_dq_dk_dv: return backward_dq_dk_dv(problem);
    case Family::bwd_convert_dq: return backward_convert_dq(problem);
  }
}

}  // namespace tilefmha::reference
