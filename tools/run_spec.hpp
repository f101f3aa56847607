// `tilefmha run` flags (and the metadata files of --load) -> the problem to run: shapes,
// features, sequence and page tables. Tensors are attached later (run_tensors).
#pragma once

#include <cstdint>
#include <optional>

#include "run_files.hpp"
#include "run_options.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::cli {

// The stages one `run` executes on the reference.
enum class RunStages : uint8_t {
  forward,   // fwd, fwd_pagedkv, batch_prefill
  splitkv,   // fwd_splitkv partials, then fwd_splitkv_combine into O
  backward,  // a forward for O and LSE, then bwd_dot_do_o, bwd_dq_dk_dv, bwd_convert_dq
  append     // fwd_appendkv into the caches, then a forward (fwd or fwd_pagedkv) over them: one
             // fwd_appendkv problem with O (attention_after_append)
};

struct RunSpec {
  RunStages stages = RunStages::forward;
  // Shapes, features, seqstarts and page tables; no tensors yet. family is the family of the
  // main stage (fwd_splitkv for split-KV, bwd_dq_dk_dv for backward).
  Problem problem;
  bool bhsd = false;  // memory order of Q/K/V/O (files are always logical bshd)
  bool want_lse = false;
  std::optional<double> sink_logit;  // every head's sink logit when no sink_logits.npy
  // Paged problems: whether k.npy/v.npy of --load hold the page pool itself (a page table file
  // came with them) rather than logical K/V to scatter into a shuffled pool.
  bool kv_pool_from_files = false;
  uint64_t input_seed = 0;
  // A quantizing append (fp8 pool, per_page scales): the new tokens' dtype; else the problem's.
  DType new_dtype = DType::fp32;
};

// Validates the flags against each other (exit-2 errors name the flag) and resolves them.
// `input` is the --load directory when there is one.
RunSpec resolve_run_spec(const RunOptions& options, InputDir* input);

// Total key tokens of the K/V files in group mode (seqstart_k's last entry).
int64_t total_keys(const Problem& problem);

}  // namespace tilefmha::cli
