// Problem -> FwdParams of the forward kernels (sm80_mma, simt_f32; sm90_ws extends them). The
// problem's tensors must be device views (MemorySpace::device); its index metadata lives in host
// vectors, so the caller uploads it and passes the device copies here.
#pragma once

#include <cstdint>

#include "fmha/fwd_params.h"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Device copies of the problem's index vectors (int64, same lengths); null where the problem's
// vector is empty.
struct FwdDeviceIndices {
  const int64_t* seqstart_q = nullptr;
  const int64_t* seqstart_k = nullptr;
  const int64_t* seqlen_k_per_batch = nullptr;
  // Page tables (int32 page ids, int64 offsets), as PagedKv holds them.
  const int32_t* block_table = nullptr;
  const int64_t* page_indptr = nullptr;
  const int32_t* page_indices = nullptr;
  // append.rope_position_offsets (fwd_appendkv), null when absent.
  const int64_t* rope_position_offsets = nullptr;
};

// For a problem validate() accepted (Dispatcher::plan validates once; a run does not again):
// checks what the kernel of `pipeline` additionally needs, throwing
// Error(invalid_problem) or Error(not_supported) naming the field and value:
//   * family fwd, fwd_splitkv, fwd_pagedkv or batch_prefill (the paged ones with the device
//     page table their table kind needs), or a backward family, whose kernels embed these
//     parameters (fmha/bwd_params.h): it binds LSE always and O when present; dtype fp16 or bf16
//     for the tensor-core pipelines (sm80_mma, sm90_ws), fp32 for simt_f32;
//   * every tensor the kernel reads or writes in device memory;
//   * Q/K/V/O: dim stride 1; for the tensor-core pipelines also other strides multiples of
//     8 elements, data 16-byte aligned and head dims multiples of 8 (they move 16-byte chunks),
//     while simt_f32 moves single elements and takes any stride, alignment and head dim;
//   * the device index arrays the problem's mode needs.
//
// Split-KV: a fwd_splitkv problem, or a fwd problem with `split` (the plan workspace's partials),
// binds num_splits and the fp32 partials (split.o_acc / split.lse_acc, device views) instead of
// O, LSE and the sink logit, which the combine stage writes and adds.
fmha::FwdParams make_fwd_params(const Problem& problem, const FwdDeviceIndices& indices,
                                Pipeline pipeline = Pipeline::sm80_mma,
                                const SplitKv* split = nullptr);

}  // namespace tilefmha::runtime
