// The forward kernels' launch parameters: one plain aggregate shared verbatim by host code (which
// fills it from a Problem) and device code (which receives it by value). Only built-in types, so
// host and NVRTC lay it out identically; sizes and strides are 64-bit and in elements.
#pragma once

namespace tilefmha::fmha {

// Element type of the optional elementwise bias, chosen at run time (the kernel's identity does
// not carry it).
enum class ScalarKind : int { fp32 = 0, fp16 = 1, bf16 = 2 };

// Strides of a [batch, seq, head, dim] view; the dim stride is 1.
struct TokenStrides {
  long long batch;
  long long seq;
  long long head;
};

// Strides of a [batch, head, block] table of per-block fp8 descales.
struct BlockScaleStrides {
  long long batch;
  long long head;
  long long block;
};

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // null unless the kernel stores LSE
  TokenStrides q_strides, k_strides, v_strides, o_strides;
  long long lse_batch_stride, lse_head_stride, lse_seq_stride;

  long long batch;
  long long nhead_q;
  long long nhead_k;
  long long head_group;  // nhead_q / nhead_k: query heads per KV head
  long long seqlen_q;    // batch mode: every sequence; group mode: the longest
  long long seqlen_k;
  long long hdim_q;  // real head dims (the kernel's tile may be wider)
  long long hdim_v;

  // Group mode: batch + 1 prefix sums (device memory). Optional per-sequence key counts (both
  // modes); null when absent.
  const long long* seqstart_q;
  const long long* seqstart_k;
  const long long* seqlen_k_per_batch;

  // Logits: s = scale * q.k; soft cap s <- softcap * tanh(s / softcap); then bias or ALiBi.
  float scale;
  float scale_log2;  // scale * log2(e): the plain path works in base 2
  float softcap;
  float softcap_inverse;

  const void* bias;  // [b, h, i, j] with 0-stride broadcast
  ScalarKind bias_kind;
  long long bias_batch_stride, bias_head_stride, bias_row_stride, bias_col_stride;

  const float* alibi_slopes;  // [h] (batch stride 0) or [b, h]
  long long alibi_batch_stride, alibi_head_stride;

  const float* sink_logits;  // per query head, null when absent
  long long sink_stride;

  // Mask: key j visible to query i when d - window_left <= j <= d + window_right with
  // d = i (+ seqlen_k - seqlen_q when bottom-right aligned); -1 = unbounded; keys j < sink_tokens
  // also pass the left bound.
  long long window_left;
  long long window_right;
  long long sink_tokens;
  int bottom_right;

  // Dropout: keep iff the Philox word >= dropout_threshold; kept values scaled by keep_scale.
  unsigned long long dropout_seed;
  unsigned long long dropout_offset;
  unsigned int dropout_threshold;
  float dropout_keep_scale;

  // Paged K/V (fwd_pagedkv, batch_prefill): k and v point at page pools, and k/v_strides are
  // their [page, slot, head] strides (the views' batch, seq and head). Key j of sequence b lives
  // in page pages_b[j / page_size], slot j % page_size, where pages_b is page_table +
  // page_indptr[b] (SGLang page lists) or page_table + b * page_table_stride (vLLM block
  // tables, page_indptr null). Null page_table: contiguous K/V.
  const int* page_table;
  const long long* page_indptr;
  long long page_table_stride;
  long long page_size;

  // Split-KV (fwd_splitkv kernels only; num_splits 1 and null partials otherwise): split s of
  // sequence b covers keys [s * chunk, min((s + 1) * chunk, len_k)) with
  // chunk = splitkv_chunk(len_k, num_splits) (fmha/splitkv.h). Each split writes its partial O,
  // normalized by its own softmax sum and without the sink logit, as fp32 into o_acc
  // [split, batch, head, seq, dim], and its natural-log LSE into lse_acc [split, batch, head,
  // seq] (-inf where the split saw no key). Group mode indexes batch 0 and the packed token.
  int num_splits;
  float* o_acc;
  long long o_acc_split_stride, o_acc_batch_stride, o_acc_head_stride, o_acc_seq_stride;
  float* lse_acc;
  long long lse_acc_split_stride, lse_acc_batch_stride, lse_acc_head_stride, lse_acc_seq_stride;

  // FP8 inputs (x = code * descale). Per tensor: scale and scale_log2 already carry the Q and
  // K descales, and O is multiplied by fp8_v_descale. Per block: fp32 tables [batch, head,
  // ceil(seq / 128)] of one descale per 128 tokens (group mode: sequence index and local token).
  float fp8_v_descale;
  // Per page (paged caches): fp32 [num_pages, nhead_k] descales of K and V, strides in
  // elements; Q's per-tensor descale is in scale, like per tensor.
  const float* fp8_k_page;
  const float* fp8_v_page;
  long long fp8_page_stride, fp8_page_head_stride;
  const float* fp8_q_block;
  const float* fp8_k_block;
  const float* fp8_v_block;
  BlockScaleStrides fp8_q_block_strides, fp8_k_block_strides, fp8_v_block_strides;
};

}  // namespace tilefmha::fmha
