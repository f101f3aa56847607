// Problem -> BwdParams of the three backward kernels (kernels/fmha/bwd_params.h).
#pragma once

#include <cstdint>
#include <string>

#include "fmha/bwd_params.h"
#include "runtime/fwd_params.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// D and the fp32 dQ accumulator of a backward run: the problem's own views (bwd.d, bwd.dq_acc)
// or views into the plan workspace. In deterministic mode dq_acc holds `dq_slices` slices of
// Q's shape, `dq_slice_stride` elements apart (one per key block of the dq_dk_dv kernel).
struct BackwardScratch {
  TensorView d;
  TensorView dq_acc;
  int64_t dq_slices = 1;
  int64_t dq_slice_stride = 0;
  // The sm90_ws dq_dk_dv kernel writes the accumulator in its chunk-swizzled row order
  // (fmha::BwdParams::dq_acc_swizzled), which bwd_convert_dq then reads back.
  bool dq_swizzled = false;
  // Deterministic sm90_ws: the per-(sequence, query head, query block) ordering counters,
  // zeroed by bwd_dot_do_o.
  int32_t* dq_semaphores = nullptr;
  int64_t dq_semaphore_count = 0;
  // A backward with bwd.dsink: bwd_dot_do_o's per-(CTA, query head) dSink partials,
  // [nhead_q][dsink_partial_count] (fmha::BwdParams::dsink_partials). Null otherwise.
  float* dsink_partials = nullptr;
  int64_t dsink_partial_count = 0;
};

// For a backward problem validate() accepted, with the forward's fields from make_fwd_params
// (sm80_mma: fp16/bf16, 16-byte chunks). Throws Error naming the field and value unless every
// view the three kernels touch (dO, D, dQ accumulator, dQ, dK, dV) is a device view with a
// contiguous last dim, 16-bit views have strides that are multiples of 8 elements and 16-byte
// aligned data, and the fp32 accumulator has strides that are multiples of 4 and 16-byte aligned
// data. dQ, dK, dV are bound only when set (each stage checks what it writes).
fmha::BwdParams make_bwd_params(const Problem& problem, const FwdDeviceIndices& indices,
                                const BackwardScratch& scratch);

// How the sm80_mma backward writes bwd.dbias. A dBias without broadcast gets one store per
// element; one that broadcasts (a zero stride on a dim of extent > 1) sums the pairs sharing
// an element with fp32 atomics, so it must be fp32, dense over its other dims (the launch
// zeroes its `zero_bytes` from data) and cannot be deterministic.
struct DbiasWrites {
  bool accumulate = false;
  int64_t zero_bytes = 0;
};
DbiasWrites dbias_writes(const Problem& problem);
// Why the GPU backward cannot write this problem's dBias (field and message), or "" when it can.
std::string dbias_refusal(const Problem& problem);

}  // namespace tilefmha::runtime
