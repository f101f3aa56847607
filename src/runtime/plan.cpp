#include "runtime/plan.hpp"

#include <sstream>

namespace tilefmha::runtime {

std::string problem_signature(const Problem& p) {
  std::ostringstream key;
  key << to_string(p.family) << '|' << to_string(p.dtype) << '>' << to_string(p.out_dtype) << '|'
      << to_string(p.mode) << '|' << p.batch << ',' << p.nhead_q << ',' << p.nhead_k << ','
      << p.seqlen_q << ',' << p.seqlen_k << ',' << p.hdim_q << ',' << p.hdim_v << '|'
      << to_string(p.mask.kind) << ',' << to_string(p.mask.align) << ',' << p.mask.window_left
      << ',' << p.mask.window_right << ',' << p.mask.sink_tokens << '|' << to_string(p.bias_kind)
      << '|' << (p.softcap > 0) << (p.sink_logits.empty() ? 0 : 1) << p.return_lse
      << p.has_dropout() << (p.seqlen_k_per_batch.empty() ? 0 : 1) << '|'
      << to_string(p.paged.table) << ',' << to_string(p.paged.layout) << ',' << p.paged.page_size
      << '|' << to_string(p.fp8.kind) << '|' << p.split.num_splits << '|'
      << to_string(p.append.rope) << '|' << p.bwd.deterministic << (p.bwd.dbias.empty() ? 0 : 1);
  return key.str();
}

}  // namespace tilefmha::runtime
