// The append-KV kernel's launch parameters (fmha/appendkv.h): one plain aggregate shared verbatim
// by host code (runtime/appendkv_params.cpp fills it) and device code (which receives it by
// value). Only built-in types, so host and NVRTC lay it out identically; sizes and strides are
// 64-bit and in elements, every view's dim stride is 1.
#pragma once

#include "fmha/fwd_params.h"

namespace tilefmha::fmha {

enum class RopeMode : int { none = 0, interleaved = 1, half_rotated = 2 };

// The most heads one thread group of a RoPE kernel moves: a run of one token's heads shares the
// token's cos and sin, formed once. The kernel's registers are sized for it
// (AppendKvTraits::kRunHeads) and the host's run lengths (codegen::appendkv_runs) never exceed
// it. A plain copy (RopeMode::none) moves one head per group.
constexpr int kAppendKvRunHeads = 8;

// The largest finite fp8 values a page's scale maps its largest new value to.
constexpr float kAppendKvE4m3Largest = 448.0f, kAppendKvE5m2Largest = 57344.0f;

// The scale a page takes in a quantizing append (tilefmha::quantized_page_scale defines it; host
// and device compute it here, in float): `largest` the fp8 type's largest finite value, `held`
// whether the page held keys before, new_amax the largest finite magnitude of its new values.
constexpr float appendkv_page_scale(float largest, bool held, float old_scale, float new_amax) {
  if (held && new_amax <= old_scale * largest) return old_scale;
  return new_amax > 0.0f ? new_amax / largest : 1.0f;
}

struct AppendKvParams {
  // New tokens [batch, seqlen_knew, nhead_k, hdim].
  const void* k_new;
  const void* v_new;
  TokenStrides k_new_strides, v_new_strides;
  // The caches: contiguous [batch, capacity, nhead_k, hdim], or page pools whose strides are
  // [page, slot, head] (the views' batch, seq and head strides, whatever the KvLayout).
  void* k;
  void* v;
  TokenStrides k_strides, v_strides;
  // Q [batch, seqlen_q, nhead_q, hdim_q], rotated in place; null unless rotate_q.
  void* q;
  TokenStrides q_strides;

  long long batch;
  long long nhead_q;
  long long nhead_k;
  long long seqlen_q;
  long long seqlen_knew;
  long long hdim_q;
  long long hdim_v;

  // Cached key counts before the append (device, batch entries): new token t of sequence b goes
  // to key seqlen_k[b] + t.
  const long long* seqlen_k;
  // Null, or where the kernel writes seqlen_k[b] + seqlen_knew for a following attention stage
  // (plan workspace), so that no host round trip sits between the two launches.
  long long* seqlen_k_after;

  // Paged caches, as FwdParams: key j of sequence b lives in page pages_b[j / page_size], slot
  // j % page_size, pages_b = page_table + page_indptr[b] (SGLang) or + b * page_table_stride
  // (vLLM, page_indptr null). Null page_table: contiguous caches.
  const int* page_table;
  const long long* page_indptr;
  long long page_table_stride;
  long long page_size;

  // RoPE over the first rotary_dim dims: pairs (2f, 2f + 1) (interleaved) or (f, f + rd / 2)
  // (half_rotated). Angles from fp32 tables [position, rotary_dim / 2] (row stride
  // rope_table_stride), or, with null tables, position * rope_theta^(-2f / rotary_dim), which the
  // kernel forms as rope_ratio^f with rope_ratio = rope_theta^(-2 / rotary_dim) (host, double).
  RopeMode rope;
  long long rotary_dim;
  const float* rope_cos;
  const float* rope_sin;
  long long rope_cos_stride, rope_sin_stride;
  double rope_theta;
  double rope_ratio;
  // Null, or per-sequence offsets added to the RoPE positions (not to the cache slots).
  const long long* position_offsets;

  // Thread groups of each part of the launch: k_groups of K, as many of V, then q_groups of Q.
  // A group moves a run of k_run (q_run) consecutive heads of one token, the last run of a token
  // the heads left.
  long long k_run;
  long long k_groups;  // batch * seqlen_knew * ceil(nhead_k / k_run)
  long long q_run;
  long long q_groups;  // batch * seqlen_q * ceil(nhead_q / q_run), 0 unless Q rotates
  // A quantizing append (AppendKvTraits::kQuantize: fp16 or bf16 new tokens into an fp8 paged
  // cache with per-page scales): a K (V) group is one (sequence, page segment, KV head), the
  // segment-th page the sequence's new tokens may reach (`segments` a sequence:
  // ceil(seqlen_knew / page_size) + 1; k_groups = batch * segments * nhead_k, no Q groups).
  // K's and V's scales [page, head] are read and updated.
  int new_bf16;  // the new tokens' type: 1 bf16, 0 fp16
  long long segments;
  float* k_page_scales;
  float* v_page_scales;
  long long scale_page_stride, scale_head_stride;
};

}  // namespace tilefmha::fmha
