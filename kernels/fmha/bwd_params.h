// The backward kernels' launch parameters (bwd_dot_do_o.h, bwd_sm80.h, bwd_convert_dq.h): one
// plain aggregate shared verbatim by host code (runtime/bwd_params.cpp fills it) and device code
// (which receives it by value). Only built-in types, so host and NVRTC lay it out identically;
// sizes and strides are 64-bit and in elements.
#pragma once

#include "fmha/fwd_params.h"

namespace tilefmha::fmha {

// The forward's fields (Q, K, V, O, LSE, shapes, sequence tables, scale, soft cap, mask) live in
// `fwd`, so the backward reuses the forward's hooks (SeqInfo, WindowMask, the logits) unchanged.
struct BwdParams {
  FwdParams fwd;

  // dO [batch, seq, head, hdim_v] in the input dtype.
  const void* d_o;
  TokenStrides d_o_strides;
  // D = rowsum(dO * O), fp32 [batch, head, seq] (LSE's layout).
  float* d;
  long long d_batch_stride, d_head_stride, d_seq_stride;

  // fp32 dQ accumulator [slice, batch, seq, head, hdim_q]. One slice (zeroed by bwd_dot_do_o,
  // added to with atomics by bwd_dq_dk_dv) unless deterministic: then slice n holds the
  // contribution of key block n alone, written with plain stores, and bwd_convert_dq sums the
  // slices in order, so repeated runs give identical bits.
  float* dq_acc;
  TokenStrides dq_acc_strides;
  long long dq_acc_slice_stride;
  long long dq_acc_slices;

  // Gradients in the output dtype: dQ like Q, dK like K, dV like V.
  void* dq;
  TokenStrides dq_strides;
  void* dk;
  TokenStrides dk_strides;
  void* dv;
  TokenStrides dv_strides;

  // Rows of the row-wise kernels (dot_do_o, convert_dq): batch x seq x head, where group mode
  // packs its sequences as batch 1 with seq the total token count.
  long long row_batches;
  long long row_seqlen;

  // 1 where the sm90_ws kernel wrote the accumulator: within each 64-column panel of a row, the
  // 8-float chunk c of row g (packed seq index) sits at chunk c ^ (g % 8), the order its
  // conflict-free shared-memory tile has and its one bulk copy per block keeps.
  int dq_acc_swizzled;
  // Deterministic sm90_ws (slices = 1): one counter per (sequence, query head, query block of
  // the kernel), zeroed by bwd_dot_do_o; a key block adds its dQ to a query block only once the
  // counter says every key block before it in the fixed order has, then raises it. Null
  // otherwise.
  int* dq_semaphores;
  long long dq_semaphore_count;

  // dBias (bwd_dq_dk_dv kernels with the dbias trait): [batch, head, seqlen_q, seqlen_k] of
  // dbias_kind with zero strides where it broadcasts. Not broadcast: every element is stored
  // once. Broadcast (dbias_accumulate, fp32 only): the launch zeroes the view and the kernel
  // adds each visible pair's dS atomically. Null without dBias.
  void* dbias;
  ScalarKind dbias_kind;
  long long dbias_batch_stride, dbias_head_stride, dbias_row_stride, dbias_col_stride;
  int dbias_accumulate;

  // dSink (bwd.dsink set; null pointers otherwise): the sink logit's gradient
  // dsink[h] = -sum_i exp(sink[h] - lse_i) * D_i over head h's rows, without fp32 atomics.
  // bwd_dot_do_o CTA c writes the sum of its rows of head h into
  // dsink_partials[h * dsink_partial_count + c], every (c, h) slot of every CTA (0 where it has no
  // such row), so nothing stale is ever read; bwd_convert_dq sums each head's slots in a fixed
  // order and stores dsink[h * dsink_stride]. dsink_partial_count is bwd_dot_do_o's grid.
  float* dsink_partials;
  long long dsink_partial_count;
  float* dsink;
  long long dsink_stride;
};

}  // namespace tilefmha::fmha
