#include "runtime/stage_runner.hpp"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "runtime/plan_key.hpp"
#include "templates/kernel_template.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

// Each region starts on a 256-byte boundary: the alignment cudaMalloc gives, which vectorized
// and TMA accesses of the partials expect.
constexpr int64_t kRegionAlignment = 256;

int64_t reserve(WorkspaceLayout& layout, int64_t bytes) {
  const int64_t offset =
      (layout.bytes + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
  layout.bytes = offset + bytes;
  return offset;
}

template <class Index>
int64_t index_bytes(const std::vector<Index>& values) {
  return static_cast<int64_t>(values.size() * sizeof(Index));
}

// Reserves a region for a host index vector, or none (-1) when it is empty.
template <class Index>
int64_t reserve_index(WorkspaceLayout& layout, const std::vector<Index>& values) {
  return values.empty() ? -1 : reserve(layout, index_bytes(values));
}

template <class Index>
const Index* upload(const std::vector<Index>& values, int64_t offset, jit::CUdeviceptr workspace,
                    jit::CUstream stream) {
  if (values.empty() || offset < 0) return nullptr;
  const jit::CUdeviceptr destination = workspace + static_cast<jit::CUdeviceptr>(offset);
  jit::copy_to_device_async(destination, std::as_bytes(std::span(values)), stream);
  return reinterpret_cast<const Index*>(destination);
}

// A forward whose every sequence has no key (batch mode seqlen_k = 0; group mode: the longest
// key length is 0, so total_k = 0).
bool has_no_keys(const Problem& problem) {
  const bool forward = problem.family == Family::fwd || problem.family == Family::fwd_splitkv;
  return forward && problem.seqlen_k == 0;
}

// Batch rows of the stand-in K/V: one token per sequence in batch mode, one in group mode.
int64_t empty_kv_rows(const Problem& problem) {
  return problem.mode == Mode::group ? 1 : problem.batch;
}

// K and V of `problem` re-pointed at `layout.empty_kv`: [rows, 1, nhead_k, hdim] views, both
// over the same never-read bytes.
void bind_empty_kv(Problem& problem, const WorkspaceLayout& layout, jit::CUdeviceptr workspace) {
  const int64_t heads = problem.nhead_k, width = std::max(problem.hdim_q, problem.hdim_v);
  for (auto [view, dim] : {std::pair{&problem.k, problem.hdim_q}, {&problem.v, problem.hdim_v}}) {
    TensorView& v = *view;
    v.data = reinterpret_cast<void*>(workspace + static_cast<jit::CUdeviceptr>(layout.empty_kv));
    v.dtype = problem.dtype;
    v.space = MemorySpace::device;
    v.rank = 4;
    v.shape = {empty_kv_rows(problem), 1, heads, dim};
    v.stride = {heads * width, heads * width, width, 1};
  }
}

// A failure while loading a stage's function, filling its parameters or launching it, with
// the kernel and the problem named: a driver error alone ("cuLaunchKernel failed:
// CUDA_ERROR_INVALID_VALUE") does not say which of a plan's stages, or which call, failed.
Error stage_error(const Error& error, const PlannedStage& stage, const Problem& problem) {
  return Error(
      error.kind(),
      "kernel " + stage.kernel.name() + " on problem " + problem.describe() + ": " + error.what(),
      error.field());
}

// D and the dQ accumulator of a backward problem that brings none (group mode: batch x the
// longest rows bound the packed tokens, as for the split partials).
void reserve_backward(WorkspaceLayout& layout, const Problem& problem,
                      const BackwardWorkspace& backward) {
  const int64_t dq_slices = backward.dq_slices, dq_semaphores = backward.dq_semaphores;
  const int64_t dsink_partial_count = backward.dsink_partial_count;
  layout.dq_swizzled = backward.dq_swizzled;
  const bool group = problem.mode == Mode::group;
  layout.batch_rows = group ? 1 : problem.batch;
  layout.seq_rows = group ? problem.batch * problem.seqlen_q : problem.seqlen_q;
  const int64_t rows = layout.batch_rows * layout.seq_rows * problem.nhead_q;
  if (problem.bwd.d.empty()) layout.bwd_d = reserve(layout, rows * int64_t{4});
  layout.dq_slices = problem.bwd.deterministic ? std::max<int64_t>(dq_slices, 1) : 1;
  if (problem.bwd.dq_acc.empty() || problem.bwd.deterministic) {
    // Slices start on 16-byte boundaries: the kernels move the accumulator in float4s.
    layout.dq_slice_stride = (rows * problem.hdim_q + 3) / 4 * 4;
    layout.dq_acc = reserve(layout, layout.dq_slices * layout.dq_slice_stride * int64_t{4});
  }
  if (dq_semaphores > 0) {
    layout.dq_semaphore_count = dq_semaphores;
    layout.dq_semaphores = reserve(layout, dq_semaphores * int64_t{sizeof(int32_t)});
  }
  if (!problem.bwd.dsink.empty() && dsink_partial_count > 0) {
    layout.dsink_partial_count = dsink_partial_count;
    layout.dsink_partials = reserve(layout, dsink_partial_count * problem.nhead_q * int64_t{4});
  }
}

// The backward stages' D and dQ accumulator: the problem's views, or the workspace's regions.
runtime::BackwardScratch backward_scratch(const WorkspaceLayout& layout, const Problem& problem,
                                          jit::CUdeviceptr workspace) {
  runtime::BackwardScratch scratch;
  scratch.d = problem.bwd.d;
  scratch.dq_acc = problem.bwd.dq_acc;
  auto view = [&](int64_t offset) {
    TensorView v;
    v.data = reinterpret_cast<void*>(workspace + static_cast<jit::CUdeviceptr>(offset));
    v.dtype = DType::fp32;
    v.space = MemorySpace::device;
    return v;
  };
  const int64_t batch = layout.batch_rows, seq = layout.seq_rows, heads = problem.nhead_q;
  if (layout.bwd_d >= 0) {
    scratch.d = view(layout.bwd_d);
    scratch.d.rank = 3;
    scratch.d.shape = {batch, heads, seq};
    scratch.d.stride = {heads * seq, seq, 1};
  }
  if (layout.dq_acc >= 0) {
    const int64_t dim = problem.hdim_q;
    scratch.dq_acc = view(layout.dq_acc);
    scratch.dq_acc.rank = 4;
    // Head-major: the rows of one head are contiguous, so the sm90_ws kernel adds a query
    // block's dQ with one bulk copy.
    scratch.dq_acc.shape = {batch, seq, heads, dim};
    scratch.dq_acc.stride = {seq * heads * dim, dim, seq * dim, 1};
    scratch.dq_slices = layout.dq_slices;
    scratch.dq_slice_stride = layout.dq_slice_stride;
  }
  scratch.dq_swizzled = layout.dq_swizzled;
  if (layout.dq_semaphores >= 0) {
    scratch.dq_semaphores = static_cast<int32_t*>(view(layout.dq_semaphores).data);
    scratch.dq_semaphore_count = layout.dq_semaphore_count;
  }
  if (layout.dsink_partials >= 0) {
    scratch.dsink_partials = static_cast<float*>(view(layout.dsink_partials).data);
    scratch.dsink_partial_count = layout.dsink_partial_count;
  }
  return scratch;
}

}  // namespace

BackwardWorkspace backward_workspace(const Problem& problem,
                                     const std::vector<PlannedStage>& stages) {
  BackwardWorkspace backward;
  for (const PlannedStage& stage : stages) {
    const KernelConfig& kernel = stage.kernel;
    // bwd_dot_do_o's grid is fixed at plan time, and with it the dSink partials' count.
    if (kernel.family == Family::bwd_dot_do_o)
      backward.dsink_partial_count = static_cast<int64_t>(stage.shape.grid[0]);
    if (kernel.family != Family::bwd_dq_dk_dv || kernel.block_n <= 0) continue;
    backward.dq_swizzled = kernel.pipeline == Pipeline::sm90_ws;
    // (The Hopper kernel may take turns outside deterministic mode too: its launch form says.)
    if (backward.dq_swizzled && kernel.deterministic)
      backward.dq_semaphores = problem.batch * problem.nhead_q *
                               ((problem.seqlen_q + kernel.block_m - 1) / kernel.block_m);
    else
      backward.dq_slices = (problem.seqlen_k + kernel.block_n - 1) / kernel.block_n;
  }
  return backward;
}

WorkspaceLayout workspace_layout(const Problem& problem, int64_t num_splits,
                                 int64_t attention_bytes, const BackwardWorkspace& backward) {
  WorkspaceLayout layout;
  layout.seqstart_q = reserve_index(layout, problem.seqstart_q);
  layout.seqstart_k = reserve_index(layout, problem.seqstart_k);
  layout.seqlen_k = reserve_index(layout, problem.seqlen_k_per_batch);
  // Page tables vary in length between calls of one plan: their regions hold the capacity
  // class of the plan key (page_table_capacity), not the planned problem's exact length.
  const PagedKv& paged = problem.paged;
  const int64_t capacity = page_table_capacity(paged);
  if (!paged.block_table.empty())
    layout.block_table = reserve(layout, capacity * int64_t{sizeof(int32_t)});
  layout.page_indptr = reserve_index(layout, paged.page_indptr);
  if (!paged.page_indices.empty())
    layout.page_indices = reserve(layout, capacity * int64_t{sizeof(int32_t)});
  if (has_no_keys(problem))
    layout.empty_kv =
        reserve(layout, empty_kv_rows(problem) * problem.nhead_k *
                            std::max(problem.hdim_q, problem.hdim_v) * dtype_size(problem.dtype));
  if (num_splits > 1 && (problem.family == Family::fwd || problem.family == Family::fwd_pagedkv)) {
    // Group mode packs sequences along one batch row; batch x longest rows bounds the tokens.
    const bool group = problem.mode == Mode::group;
    layout.batch_rows = group ? 1 : problem.batch;
    layout.seq_rows = group ? problem.batch * problem.seqlen_q : problem.seqlen_q;
    const int64_t rows = num_splits * layout.batch_rows * problem.nhead_q * layout.seq_rows;
    layout.o_acc = reserve(layout, rows * problem.hdim_v * int64_t{4});
    layout.lse_acc = reserve(layout, rows * int64_t{4});
  }
  layout.rope_position_offsets = reserve_index(layout, problem.append.rope_position_offsets);
  if (appends_then_attends(problem)) {
    layout.key_lengths_after = reserve(layout, problem.batch * int64_t{sizeof(int64_t)});
    if (attention_bytes > 0) layout.attention = reserve(layout, attention_bytes);
  }
  if (problem.is_backward()) reserve_backward(layout, problem, backward);
  return layout;
}

Problem attention_stage_problem(const Problem& problem, const int64_t* key_lengths_after) {
  Problem attend = attention_after_append(problem);
  attend.seqlen_k_per_batch.clear();
  attend.device_indices.seqlen_k = key_lengths_after;
  return attend;
}

SplitKv workspace_partials(const WorkspaceLayout& layout, const Problem& problem,
                           int64_t num_splits, jit::CUdeviceptr workspace) {
  SplitKv split;
  split.num_splits = num_splits;
  // The workspace holds batch x the longest rows; the views cover the call's rows (group mode:
  // the packed tokens of O), with the workspace's strides.
  const int64_t rows = layout.seq_rows, heads = problem.nhead_q, dim = problem.hdim_v;
  const int64_t used_rows = problem.mode == Mode::group ? problem.o.shape[1] : rows;
  if (used_rows > rows)
    throw Error(ErrorKind::invalid_problem,
                "o.shape[1] = " + std::to_string(used_rows) + " tokens exceed batch x seqlen_q = " +
                    std::to_string(rows) + ", which sized the plan's split partials");
  auto view = [&](int64_t offset, int rank) {
    TensorView v;
    v.data = reinterpret_cast<void*>(workspace + static_cast<jit::CUdeviceptr>(offset));
    v.dtype = DType::fp32;
    v.space = MemorySpace::device;
    v.rank = rank;
    return v;
  };
  split.o_acc = view(layout.o_acc, 5);
  split.o_acc.shape = {num_splits, layout.batch_rows, heads, used_rows, dim};
  split.o_acc.stride = {layout.batch_rows * heads * rows * dim, heads * rows * dim, rows * dim, dim,
                        1};
  split.lse_acc = view(layout.lse_acc, 4);
  split.lse_acc.shape = {num_splits, layout.batch_rows, heads, used_rows, 0};
  split.lse_acc.stride = {layout.batch_rows * heads * rows, heads * rows, rows, 1, 0};
  return split;
}

void run_stages(const Plan& plan, const Problem& problem, const Registry& registry,
                jit::CUstream stream, jit::CUdeviceptr workspace) {
  if (plan.workspace.bytes > 0 && workspace == 0)
    throw Error(ErrorKind::invalid_argument, "workspace is null but the plan needs " +
                                                 std::to_string(plan.workspace.bytes) +
                                                 " bytes of it");
  const WorkspaceLayout& layout = plan.workspace;
  const DeviceIndexArrays& device = problem.device_indices;
  templates::DeviceIndices indices;
  // Each index array: the caller's device copy, else an asynchronous upload of the host vector.
  auto bind = [&](const auto* on_device, const auto& host, int64_t offset) {
    return on_device != nullptr ? on_device : upload(host, offset, workspace, stream);
  };
  const PagedKv& paged = problem.paged;
  indices.seqstart_q = bind(device.seqstart_q, problem.seqstart_q, layout.seqstart_q);
  indices.seqstart_k = bind(device.seqstart_k, problem.seqstart_k, layout.seqstart_k);
  indices.seqlen_k_per_batch = bind(device.seqlen_k, problem.seqlen_k_per_batch, layout.seqlen_k);
  indices.block_table = bind(device.block_table, paged.block_table, layout.block_table);
  indices.page_indptr = bind(device.page_indptr, paged.page_indptr, layout.page_indptr);
  indices.page_indices = bind(device.page_indices, paged.page_indices, layout.page_indices);
  indices.rope_position_offsets =
      bind(device.rope_position_offsets, problem.append.rope_position_offsets,
           layout.rope_position_offsets);
  int64_t* key_lengths_after =
      layout.key_lengths_after < 0
          ? nullptr
          : reinterpret_cast<int64_t*>(workspace +
                                       static_cast<jit::CUdeviceptr>(layout.key_lengths_after));
  SplitKv split = problem.split;
  if (plan.splits_merged_in_cluster())
    split.num_splits = plan.num_splits;  // the cluster's size; no partials
  else if (plan.num_splits > 1)
    split = workspace_partials(layout, problem, plan.num_splits, workspace);
  // Only a problem without keys pays for the copy.
  std::optional<Problem> with_stand_in_kv;
  if (layout.empty_kv >= 0) bind_empty_kv(with_stand_in_kv.emplace(problem), layout, workspace);
  const Problem& launched = with_stand_in_kv ? *with_stand_in_kv : problem;
  std::optional<runtime::BackwardScratch> scratch;
  if (problem.is_backward()) scratch = backward_scratch(layout, problem, workspace);
  for (const PlannedStage& stage : plan.stages) {
    try {
      const jit::CUfunction function =
          stage.function != nullptr ? stage.function : registry.function(stage.kernel, stage.entry);
      const templates::StageLaunch launch{launched,
                                          indices,
                                          split,
                                          function,
                                          stage.shape,
                                          stream,
                                          stage.merges_splits_in_cluster,
                                          key_lengths_after,
                                          scratch ? &*scratch : nullptr};
      stage.kernel_template->launch(stage.kernel, launch);
    } catch (const Error& error) {
      throw stage_error(error, stage, problem);
    }
  }
  // Append -> attend: the attention reads the counts the append kernel just wrote, on the same
  // stream, so nothing waits on the host and a captured graph replays both with new lengths.
  if (plan.attention) {
    const Plan& attention = *plan.attention;
    const jit::CUdeviceptr nested =
        attention.workspace.bytes > 0 ? workspace + static_cast<jit::CUdeviceptr>(layout.attention)
                                      : 0;
    run_stages(attention, attention_stage_problem(problem, key_lengths_after), registry, stream,
               nested);
  }
}

}  // namespace tilefmha::runtime
