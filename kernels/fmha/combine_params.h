// The split-KV combine kernel's launch parameters (fmha/splitkv_combine.h): one plain aggregate
// shared verbatim by host code (runtime/combine_params.cpp fills it) and device code (which
// receives it by value). Only built-in types, so host and NVRTC lay it out identically; sizes
// and strides are 64-bit and in elements.
#pragma once

#include "fmha/fwd_params.h"

namespace tilefmha::fmha {

// The combine merges, for each row (batch b, head h, position i), the partial outputs of
// num_splits key splits: O = sum_s exp(lse_s - lse) * o_s with lse = log(sum_s exp(lse_s)
// [+ exp(sink_h)]). Rows are batch x nhead x seqlen; group mode packs its sequences as batch 1
// with seqlen the total token count, so the kernel needs no sequence table.
struct CombineParams {
  // Partial O [split, batch, head, seq, dim], dim stride 1. fp32 from the split kernels; fp16 or
  // bf16 when merging finished attention outputs (merge_states).
  const void* o_acc;
  ScalarKind o_acc_kind;
  long long o_acc_split_stride, o_acc_batch_stride, o_acc_head_stride, o_acc_seq_stride;
  // Partial LSE [split, batch, head, seq], natural log, -inf where a split saw no key.
  const float* lse_acc;
  long long lse_acc_split_stride, lse_acc_batch_stride, lse_acc_head_stride, lse_acc_seq_stride;
  long long num_splits;

  long long batch;
  long long nhead;
  long long seqlen;  // rows per batch entry
  long long hdim_v;  // the real head dim (the kernel's may be wider)

  // O [batch, seq, head, dim] in the kernel's output type (fp32, fp16 or bf16), dim stride 1.
  void* o;
  TokenStrides o_strides;
  // LSE [batch, head, seq]; null unless the kernel stores it.
  float* lse;
  long long lse_batch_stride, lse_head_stride, lse_seq_stride;
  // Per-head sink logit joining the softmax denominator once; null when absent.
  const float* sink_logits;
  long long sink_stride;
};

}  // namespace tilefmha::fmha
