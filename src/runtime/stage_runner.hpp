// What a run does between the plan and the kernels: lay out the workspace, bind the per-call
// index arrays (the caller's device arrays, or asynchronous uploads of host vectors into the
// workspace) and the split partials, and launch each stage through its kernel template.
#pragma once

#include "runtime/plan.hpp"
#include "runtime/registry.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// What a backward plan's stages need in its workspace beyond D and the dQ accumulator.
struct BackwardWorkspace {
  // A deterministic sm80_mma dq_dk_dv keeps one dQ accumulator slice per key block.
  int64_t dq_slices = 1;
  // An sm90_ws dq_dk_dv that takes turns (deterministic mode, or its launch form where turns
  // pay) orders its adds with one counter per (sequence, query head, query block) instead; every
  // sm90_ws dq_dk_dv writes the accumulator chunk-swizzled.
  int64_t dq_semaphores = 0;
  bool dq_swizzled = false;
  // With bwd.dsink: one partial per bwd_dot_do_o CTA and query head.
  int64_t dsink_partial_count = 0;
};

// The BackwardWorkspace of `problem` run by `stages` (all zero for a forward plan).
BackwardWorkspace backward_workspace(const Problem& problem,
                                     const std::vector<PlannedStage>& stages);

// The workspace of `problem` planned with `num_splits` (> 1: split-KV partials of a fwd problem).
// `attention_bytes`: the workspace of the attention plan that follows an append (fwd_appendkv
// with O), nested in this one; `backward`: what a backward plan's stages need.
WorkspaceLayout workspace_layout(const Problem& problem, int64_t num_splits,
                                 int64_t attention_bytes = 0,
                                 const BackwardWorkspace& backward = {});

// The attention problem an append -> attend plan runs after its append: key counts read from
// `key_lengths_after` (device) instead of any host vector.
Problem attention_stage_problem(const Problem& problem, const int64_t* key_lengths_after);

// The split partials of a plan, as fp32 views into `workspace` (device address).
SplitKv workspace_partials(const WorkspaceLayout& layout, const Problem& problem,
                           int64_t num_splits, jit::CUdeviceptr workspace);

// Launches every stage of `plan` on `stream` with `workspace` (at least plan.workspace.bytes, or
// 0 when the plan needs none). A stage planned without a CUDA context takes its function from
// `registry`.
void run_stages(const Plan& plan, const Problem& problem, const Registry& registry,
                jit::CUstream stream, jit::CUdeviceptr workspace);

}  // namespace tilefmha::runtime
