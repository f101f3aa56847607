// A plan: the kernels of one problem shape, in launch order, with their launch shapes and the
// layout of the workspace they share. Built once by Dispatcher::plan, validated then, and reused
// by every run of the same PlanKey; running it only fills parameters and launches.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jit/module.hpp"
#include "runtime/plan_key.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::templates {
class KernelTemplate;
}

namespace tilefmha::runtime {

struct PlannedStage {
  KernelConfig kernel;  // in its launch form (persistent, packed GQA)
  const templates::KernelTemplate* kernel_template = nullptr;
  std::string entry;                   // the kernel function of its module that runs the problem
  jit::CUfunction function = nullptr;  // loaded in the planning context
  jit::LaunchShape shape;              // its shared-memory limit already raised
  // A split kernel that merges its splits in its clusters (templates::StageContext).
  bool merges_splits_in_cluster = false;
};

// Byte offsets into the plan workspace (-1: absent). The index uploads hold the problem's host
// vectors when it has no device arrays; the split partials hold fp32 O [splits, rows..., hdim_v]
// and LSE [splits, rows...] of a fwd problem planned as split-KV + combine.
struct WorkspaceLayout {
  int64_t seqstart_q = -1;
  int64_t seqstart_k = -1;
  int64_t seqlen_k = -1;
  int64_t block_table = -1;   // paged.block_table (int32)
  int64_t page_indptr = -1;   // paged.page_indptr (int64)
  int64_t page_indices = -1;  // paged.page_indices (int32)
  int64_t o_acc = -1;
  int64_t lse_acc = -1;
  // Stand-in K/V rows for a forward with no keys at all (seqlen_k = 0): the kernels then run no
  // key block and write O = 0, LSE = -inf, but their K/V tensor maps and pointers still need a
  // non-empty tensor (TMA takes no zero extent). Never read.
  int64_t empty_kv = -1;
  // Append-KV: append.rope_position_offsets (int64 upload); in an append -> attend plan also the
  // key counts after the append (int64 [batch], written by the append kernel, read by the
  // attention) and the attention plan's own workspace.
  int64_t rope_position_offsets = -1;
  int64_t key_lengths_after = -1;
  int64_t attention = -1;
  // Backward: D (fp32 [batch_rows, nhead_q, seq_rows]) and the fp32 dQ accumulator
  // ([dq_slices][batch_rows, nhead_q, seq_rows, hdim_q], head-major so a query block of one head
  // is contiguous; slices dq_slice_stride floats apart) where the problem brings none; in
  // deterministic mode the accumulator always lives here, one slice per key block of an
  // sm80_mma dq_dk_dv kernel (sm90_ws keeps one slice and orders its adds by counters).
  int64_t bwd_d = -1;
  int64_t dq_acc = -1;
  int64_t dq_slices = 1;
  int64_t dq_slice_stride = 0;
  // The sm90_ws kernel's deterministic mode: one int32 per (sequence, query head, query block)
  // counting the key blocks that added their dQ to it, so they add in a fixed order.
  int64_t dq_semaphores = -1;
  int64_t dq_semaphore_count = 0;
  // The plan's dq_dk_dv stage is sm90_ws, which writes the accumulator chunk-swizzled
  // (fmha::BwdParams::dq_acc_swizzled) for bwd_convert_dq to read back.
  bool dq_swizzled = false;
  // A backward with bwd.dsink (a plan-key field): fp32 [nhead_q][dsink_partial_count] dSink
  // partials, one per (bwd_dot_do_o CTA, query head), reduced into bwd.dsink by bwd_convert_dq.
  int64_t dsink_partials = -1;
  int64_t dsink_partial_count = 0;
  int64_t bytes = 0;
  // Shape of the partials: [num_splits, batch_rows, nhead_q, seq_rows, hdim_v]; also the rows of
  // the backward's D and dQ accumulator.
  int64_t batch_rows = 0;
  int64_t seq_rows = 0;
};

// A workspace the plan allocated for callers that bring none, ordered so that runs from several
// streams cannot overlap on it: a run on another stream than the previous one first makes its
// stream wait (on the device, not the host) for the work queued so far on the previous stream.
// A stream under CUDA-graph capture skips that wait (capture cannot depend on uncaptured work);
// captured graphs should own their workspace or replay on the stream that ran before.
class OwnedWorkspace {
 public:
  explicit OwnedWorkspace(int64_t bytes);

  // Calls enqueue(address) under the workspace's lock, after ordering `stream` behind the
  // buffer's previous user.
  template <class Enqueue>
  void use(jit::CUstream stream, Enqueue&& enqueue) {
    std::lock_guard lock(mutex_);
    const bool capturing = order_after_previous_user(stream);
    enqueue(buffer_.address());
    mark_used(stream, capturing);
  }

 private:
  // Returns whether `stream` is capturing a graph.
  bool order_after_previous_user(jit::CUstream stream);
  void mark_used(jit::CUstream stream, bool capturing);

  std::mutex mutex_;
  jit::DeviceBuffer buffer_;
  jit::Event handoff_{false};
  jit::CUstream last_stream_ = nullptr;
  bool used_ = false;
};

struct Plan {
  PlanKey key;
  std::vector<PlannedStage> stages;
  // > 1: the stages are fwd_splitkv then the combine, or fwd_splitkv alone (below).
  int64_t num_splits = 1;
  // The split kernel's clusters merge the splits: it is the plan's only stage, with no partials.
  bool splits_merged_in_cluster() const {
    return !stages.empty() && stages.front().merges_splits_in_cluster;
  }
  WorkspaceLayout workspace;
  // Null when workspace.bytes is 0.
  std::unique_ptr<OwnedWorkspace> owned_workspace;
  // Why each stage's kernel was chosen (shown by `--explain`).
  std::string explanation;
  // An append -> attend plan (fwd_appendkv with O): the attention's plan, run after `stages` on
  // the same stream with its workspace at workspace.attention and its key counts read from
  // workspace.key_lengths_after. Null otherwise.
  std::shared_ptr<const Plan> attention;
};

}  // namespace tilefmha::runtime
