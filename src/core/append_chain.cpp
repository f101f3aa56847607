// The attention that follows an append (a fwd_appendkv problem with O): one definition shared by
// the CPU reference, validation, the GPU plan and the CLI, so that every path attends to the
// same keys.
#include <algorithm>

#include "tilefmha/problem.hpp"

namespace tilefmha {

bool appends_then_attends(const Problem& problem) {
  return problem.family == Family::fwd_appendkv && problem.o.data != nullptr;
}

Problem attention_after_append(const Problem& problem) {
  Problem attend = problem;
  attend.family = problem.is_paged() ? Family::fwd_pagedkv : Family::fwd;
  const int64_t appended = problem.append.seqlen_knew;
  attend.append = AppendKv{};
  attend.device_indices.rope_position_offsets = nullptr;
  if (!attend.seqlen_k_per_batch.empty()) {
    int64_t longest = 0;
    for (int64_t& keys : attend.seqlen_k_per_batch) {
      keys += appended;
      longest = std::max(longest, keys);
    }
    // Host lengths: seqlen_k may be the cache capacity (as the CLI sets it); it must cover the
    // longest sequence after the append.
    attend.seqlen_k = std::max(problem.seqlen_k, longest);
  } else {
    // Device lengths: seqlen_k bounds the cached counts, so the appended ones are within
    // seqlen_k + seqlen_knew.
    attend.seqlen_k = problem.seqlen_k + appended;
  }
  // A contiguous cache is read as K/V of its capacity (k.shape[1]), which bounds every length.
  if (!problem.is_paged() && problem.k.rank == 4) attend.seqlen_k = problem.k.shape[1];
  return attend;
}

}  // namespace tilefmha
