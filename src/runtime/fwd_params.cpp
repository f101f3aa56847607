#include "runtime/fwd_params.hpp"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/philox.h"
#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::runtime {
namespace {

// 16 bytes: the kernel's cp.async and store granule.
constexpr int64_t kChunkBytes = 16;

[[noreturn]] void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

void require_device(const TensorView& view, const char* field) {
  if (view.empty()) fail(ErrorKind::invalid_problem, std::string(field) + " is not set");
  if (view.space != MemorySpace::device)
    fail(ErrorKind::invalid_problem,
         std::string(field) + " is in host memory; the GPU kernel needs a device view");
}

// A Q/K/V/O view the kernel reads in 16-byte chunks, or element by element (`chunked` false).
fmha::TokenStrides token_strides(const TensorView& view, const char* field, bool chunked) {
  require_device(view, field);
  const int64_t element = dtype_size(view.dtype);
  const int64_t granule = kChunkBytes / element;
  if (view.stride[3] != 1)
    fail(ErrorKind::not_supported, std::string(field) +
                                       ".stride[3] = " + std::to_string(view.stride[3]) +
                                       ": the GPU kernel needs a contiguous head dim");
  if (!chunked) {
    if (reinterpret_cast<uintptr_t>(view.data) % element != 0)
      fail(ErrorKind::not_supported, std::string(field) + ".data is not aligned to its " +
                                         std::to_string(element) + "-byte elements");
    return {view.stride[0], view.stride[1], view.stride[2]};
  }
  const char* names[] = {"batch", "seq", "head"};
  for (int d = 0; d < 3; ++d) {
    if (view.stride[d] % granule != 0)
      fail(ErrorKind::not_supported, std::string(field) + ".stride[" + std::to_string(d) + "] (" +
                                         names[d] + ") = " + std::to_string(view.stride[d]) +
                                         ": the GPU kernel needs a multiple of " +
                                         std::to_string(granule) + " elements (16 bytes)");
  }
  if (reinterpret_cast<uintptr_t>(view.data) % kChunkBytes != 0)
    fail(ErrorKind::not_supported,
         std::string(field) + ".data is not 16-byte aligned, which the GPU kernel needs");
  return {view.stride[0], view.stride[1], view.stride[2]};
}

fmha::ScalarKind scalar_kind(DType dtype) {
  switch (dtype) {
    case DType::fp32: return fmha::ScalarKind::fp32;
    case DType::fp16: return fmha::ScalarKind::fp16;
    case DType::bf16: return fmha::ScalarKind::bf16;
    default:
      fail(ErrorKind::not_supported, "bias.dtype = " + std::string(to_string(dtype)) +
                                         ": the GPU kernel reads fp32/fp16/bf16");
  }
}

const long long* device_index(const int64_t* pointer, bool needed, const char* field) {
  if (needed && pointer == nullptr)
    fail(ErrorKind::invalid_argument,
         std::string(field) + " has entries but no device copy was given");
  return needed ? reinterpret_cast<const long long*>(pointer) : nullptr;
}

// A split-KV partial: fp32 in device memory, rank 5 (O) or 4 (LSE) as SplitKv documents.
void require_partial(const TensorView& view, const char* field, int rank) {
  require_device(view, field);
  if (view.dtype != DType::fp32)
    fail(ErrorKind::not_supported, std::string(field) +
                                       ".dtype = " + std::string(to_string(view.dtype)) +
                                       ": split-KV partials are fp32");
  if (view.rank != rank)
    fail(ErrorKind::invalid_problem, std::string(field) + ".rank = " + std::to_string(view.rank) +
                                         ", expected " + std::to_string(rank));
}

// validate() checks a fwd_splitkv problem's own partials; a plan workspace's are checked here,
// since the kernel writes every (split, row) they must hold.
void require_partial_shape(const TensorView& view, const char* field,
                           std::initializer_list<int64_t> shape) {
  int d = 0;
  bool same = true;
  std::string expected, actual;
  for (int64_t extent : shape) {
    same = same && view.shape[d] == extent;
    if (d > 0) {
      expected += ", ";
      actual += ", ";
    }
    expected += std::to_string(extent);
    actual += std::to_string(view.shape[d]);
    ++d;
  }
  if (!same)
    fail(ErrorKind::invalid_problem,
         std::string(field) + ".shape = [" + actual + "], expected [" + expected + "]");
}

void bind_split_partials(fmha::FwdParams& params, const Problem& p, const SplitKv& split) {
  require_partial(split.o_acc, "split.o_acc", 5);
  require_partial(split.lse_acc, "split.lse_acc", 4);
  const bool group = p.mode == Mode::group;
  const int64_t rows_batch = group ? 1 : p.batch;
  const int64_t rows_seq = p.query_rows();
  require_partial_shape(split.o_acc, "split.o_acc",
                        {split.num_splits, rows_batch, p.nhead_q, rows_seq, p.hdim_v});
  require_partial_shape(split.lse_acc, "split.lse_acc",
                        {split.num_splits, rows_batch, p.nhead_q, rows_seq});
  if (split.o_acc.stride[4] != 1)
    fail(ErrorKind::not_supported,
         "split.o_acc.stride[4] = " + std::to_string(split.o_acc.stride[4]) +
             ": the GPU kernel needs a contiguous head dim");
  // The split kernels store O in pairs of floats (8 bytes).
  for (int d = 0; d < 4; ++d) {
    if (split.o_acc.stride[d] % 2 != 0)
      fail(ErrorKind::not_supported, "split.o_acc.stride[" + std::to_string(d) +
                                         "] = " + std::to_string(split.o_acc.stride[d]) +
                                         ": the GPU kernel needs an even stride (8-byte pairs)");
  }
  if (reinterpret_cast<uintptr_t>(split.o_acc.data) % 8 != 0)
    fail(ErrorKind::not_supported,
         "split.o_acc.data is not 8-byte aligned, which the GPU kernel needs");
  if (reinterpret_cast<uintptr_t>(split.lse_acc.data) % 4 != 0)
    fail(ErrorKind::not_supported, "split.lse_acc.data is not aligned to its 4-byte elements");
  constexpr int64_t kMaxSplits = 1024;
  if (split.num_splits < 1 || split.num_splits > kMaxSplits)
    fail(ErrorKind::not_supported, "split.num_splits = " + std::to_string(split.num_splits) +
                                       ": the GPU kernels take 1..1024 splits");
  params.num_splits = static_cast<int>(split.num_splits);
  params.o_acc = static_cast<float*>(split.o_acc.data);
  params.o_acc_split_stride = split.o_acc.stride[0];
  params.o_acc_batch_stride = split.o_acc.stride[1];
  params.o_acc_head_stride = split.o_acc.stride[2];
  params.o_acc_seq_stride = split.o_acc.stride[3];
  params.lse_acc = static_cast<float*>(split.lse_acc.data);
  params.lse_acc_split_stride = split.lse_acc.stride[0];
  params.lse_acc_batch_stride = split.lse_acc.stride[1];
  params.lse_acc_head_stride = split.lse_acc.stride[2];
  params.lse_acc_seq_stride = split.lse_acc.stride[3];
}

// The page table of a paged problem: vLLM block tables ([batch, max_pages_per_seq] int32) or
// SGLang page lists (int64 offsets into int32 page ids), on the device.
void bind_page_table(fmha::FwdParams& params, const Problem& p, const FwdDeviceIndices& indices) {
  params.page_size = p.paged.page_size;
  switch (p.paged.table) {
    case PageTableKind::vllm_block_table:
      if (indices.block_table == nullptr)
        fail(ErrorKind::invalid_argument, "paged.block_table has no device copy");
      params.page_table = indices.block_table;
      params.page_table_stride = p.paged.max_pages_per_seq;
      params.page_indptr = nullptr;
      return;
    case PageTableKind::sglang_page_list:
      if (indices.page_indices == nullptr || indices.page_indptr == nullptr)
        fail(ErrorKind::invalid_argument,
             "paged.page_indptr / paged.page_indices have no device copy");
      params.page_table = indices.page_indices;
      params.page_indptr = reinterpret_cast<const long long*>(indices.page_indptr);
      params.page_table_stride = 0;
      return;
    case PageTableKind::none: break;
  }
  fail(ErrorKind::invalid_problem,
       "paged.table = none on a paged family (" + std::string(to_string(p.family)) + ")");
}

double fp8_score_descale(const Problem& p) {
  if (p.fp8.kind == Fp8ScaleKind::per_tensor) return p.fp8.q_descale * p.fp8.k_descale;
  // Per page, Q keeps one descale for the tensor; K's come per page in the kernel.
  return p.fp8.kind == Fp8ScaleKind::per_page ? p.fp8.q_descale : 1.0;
}

// A [num_pages, nhead_k] fp32 table of per-page descales, on the device.
const float* page_scales(const TensorView& view, const char* field) {
  require_device(view, field);
  if (view.dtype != DType::fp32 || view.rank != 2)
    fail(ErrorKind::invalid_problem,
         std::string(field) + " must be an fp32 [num_pages, nhead_k] table");
  return static_cast<const float*>(view.data);
}

// A [batch, head, ceil(seq / 128)] fp32 table of per-block descales, on the device.
const float* block_scales(const TensorView& view, const char* field,
                          fmha::BlockScaleStrides& strides) {
  require_device(view, field);
  if (view.dtype != DType::fp32 || view.rank != 3)
    fail(ErrorKind::invalid_problem, std::string(field) +
                                         " must be an fp32 [batch, head, "
                                         "block] table");
  strides = {view.stride[0], view.stride[1], view.stride[2]};
  return static_cast<const float*>(view.data);
}

// V's per-tensor descale multiplies O; per-block and per-page tables are read by the kernel.
void bind_fp8_descales(fmha::FwdParams& params, const Problem& p) {
  params.fp8_v_descale = 1.0f;
  if (p.fp8.kind == Fp8ScaleKind::per_tensor) {
    params.fp8_v_descale = static_cast<float>(p.fp8.v_descale);
  } else if (p.fp8.kind == Fp8ScaleKind::per_block) {
    params.fp8_q_block = block_scales(p.fp8.q_block, "fp8.q_block", params.fp8_q_block_strides);
    params.fp8_k_block = block_scales(p.fp8.k_block, "fp8.k_block", params.fp8_k_block_strides);
    params.fp8_v_block = block_scales(p.fp8.v_block, "fp8.v_block", params.fp8_v_block_strides);
  } else if (p.fp8.kind == Fp8ScaleKind::per_page) {
    params.fp8_k_page = page_scales(p.fp8.k_page, "fp8.k_page");
    params.fp8_v_page = page_scales(p.fp8.v_page, "fp8.v_page");
    if (p.fp8.k_page.stride[0] != p.fp8.v_page.stride[0] ||
        p.fp8.k_page.stride[1] != p.fp8.v_page.stride[1])
      fail(ErrorKind::not_supported,
           "fp8.k_page and fp8.v_page have different strides: the GPU kernel reads both with one "
           "pair");
    params.fp8_page_stride = p.fp8.k_page.stride[0];
    params.fp8_page_head_stride = p.fp8.k_page.stride[1];
  }
}

}  // namespace

fmha::FwdParams make_fwd_params(const Problem& p, const FwdDeviceIndices& indices,
                                Pipeline pipeline, const SplitKv* split) {
  // Paged K/V: the paged families, and split-KV partials of a paged cache (a fwd_pagedkv decode
  // planned as fwd_splitkv + combine, or a fwd_splitkv problem over pages).
  const bool paged = p.is_paged();
  // The backward kernels take the forward's fields (BwdParams::fwd) to reuse its hooks.
  const bool backward = p.is_backward();
  if (p.family != Family::fwd && p.family != Family::fwd_splitkv &&
      p.family != Family::fwd_pagedkv && p.family != Family::batch_prefill && !backward)
    fail(ErrorKind::not_supported,
         "family = " + std::string(to_string(p.family)) +
             ": FwdParams serve the fwd, fwd_splitkv, fwd_pagedkv, batch_prefill and backward "
             "families");
  if (paged && pipeline == Pipeline::simt_f32)
    fail(ErrorKind::not_supported, "paged.table = " + std::string(to_string(p.paged.table)) +
                                       ": the simt_f32 kernel reads contiguous K/V; paged K/V "
                                       "runs on sm80_mma and sm90_ws");
  // A fwd_splitkv problem carries its own partials; a fwd problem planned in two stages gets
  // them from the plan workspace.
  if (split == nullptr && p.family == Family::fwd_splitkv) split = &p.split;
  // The CUDA-core pipeline reads fp32 element by element; the tensor-core ones 16-byte chunks
  // of 16-bit values (sm90_ws also of fp8 codes).
  const bool chunked = pipeline != Pipeline::simt_f32;
  const bool fp8_ok = pipeline == Pipeline::sm90_ws && is_fp8(p.dtype);
  if (chunked && p.dtype != DType::fp16 && p.dtype != DType::bf16 && !fp8_ok)
    fail(ErrorKind::not_supported, "dtype = " + std::string(to_string(p.dtype)) + ": the " +
                                       std::string(to_string(pipeline)) +
                                       " kernel computes on fp16 or bf16" +
                                       (pipeline == Pipeline::sm90_ws ? " or fp8" : ""));
  if (!chunked && p.dtype != DType::fp32)
    fail(ErrorKind::not_supported,
         "dtype = " + std::string(to_string(p.dtype)) + ": the simt_f32 kernel computes on fp32");
  for (const auto& [name, dim] : {std::pair{"hdim_q", p.hdim_q}, std::pair{"hdim_v", p.hdim_v}}) {
    const int64_t granule = kChunkBytes / dtype_size(p.dtype);
    if (chunked && dim % granule != 0)
      fail(ErrorKind::not_supported, std::string(name) + " = " + std::to_string(dim) +
                                         ": the GPU kernel needs a multiple of " +
                                         std::to_string(granule) + " (16-byte rows)");
  }

  // The kernel indexes rows and keys in 32 bits with 2^30 of headroom for window offsets.
  constexpr int64_t kMaxLength = int64_t{1} << 30;
  for (const auto& [name, length] :
       {std::pair{"seqlen_q", p.seqlen_q}, std::pair{"seqlen_k", p.seqlen_k}}) {
    if (length >= kMaxLength)
      fail(ErrorKind::not_supported, std::string(name) + " = " + std::to_string(length) +
                                         ": the GPU kernel takes sequences below 2^30");
  }

  fmha::FwdParams params{};
  params.q = p.q.data;
  params.k = p.k.data;
  params.v = p.v.data;
  params.q_strides = token_strides(p.q, "q", chunked);
  params.k_strides = token_strides(p.k, "k", chunked);
  params.v_strides = token_strides(p.v, "v", chunked);
  params.num_splits = 1;
  // Split partials replace O and LSE, which the combine writes (and the sink logit, which it adds).
  if (split != nullptr) {
    bind_split_partials(params, p, *split);
  } else if (!(backward && p.o.empty())) {  // only bwd_dot_do_o reads O
    params.o = p.o.data;
    params.o_strides = token_strides(p.o, "o", chunked);
  }
  if ((p.return_lse || backward) && split == nullptr) {
    require_device(p.lse, "lse");
    params.lse = static_cast<float*>(p.lse.data);
    params.lse_batch_stride = p.lse.stride[0];
    params.lse_head_stride = p.lse.stride[1];
    params.lse_seq_stride = p.lse.stride[2];
  }

  params.batch = p.batch;
  params.nhead_q = p.nhead_q;
  params.nhead_k = p.nhead_k;
  params.head_group = p.nhead_q / p.nhead_k;
  params.seqlen_q = p.seqlen_q;
  params.seqlen_k = p.seqlen_k;
  params.hdim_q = p.hdim_q;
  params.hdim_v = p.hdim_v;

  const bool group = p.mode == Mode::group;
  params.seqstart_q = device_index(indices.seqstart_q, group, "seqstart_q");
  // A paged cache's keys start at page slot 0 of each sequence; its key counts come per
  // sequence, or (group mode) as the differences of seqstart_k, whose offsets it ignores.
  const bool keys_from_seqstarts = group && (!paged || !p.has_key_lengths());
  params.seqstart_k = device_index(indices.seqstart_k, keys_from_seqstarts, "seqstart_k");
  if (paged) bind_page_table(params, p, indices);
  const bool per_batch_keys = p.has_key_lengths();
  params.seqlen_k_per_batch =
      device_index(indices.seqlen_k_per_batch, per_batch_keys, "seqlen_k_per_batch");

  // Per-tensor fp8 descales of Q and K scale every score alike, so they fold into the scale.
  const double scale = p.scale() * fp8_score_descale(p);
  params.scale = static_cast<float>(scale);
  params.scale_log2 = static_cast<float>(scale * M_LOG2E);
  params.softcap = static_cast<float>(p.softcap);
  params.softcap_inverse = p.softcap > 0 ? static_cast<float>(1.0 / p.softcap) : 0.0f;

  if (p.bias_kind == BiasKind::elementwise) {
    require_device(p.bias, "bias");
    params.bias = p.bias.data;
    params.bias_kind = scalar_kind(p.bias.dtype);
    params.bias_batch_stride = p.bias.stride[0];
    params.bias_head_stride = p.bias.stride[1];
    params.bias_row_stride = p.bias.stride[2];
    params.bias_col_stride = p.bias.stride[3];
  } else if (p.bias_kind == BiasKind::alibi) {
    require_device(p.alibi_slopes, "alibi_slopes");
    params.alibi_slopes = static_cast<const float*>(p.alibi_slopes.data);
    const bool per_sequence = p.alibi_slopes.rank == 2;
    params.alibi_batch_stride = per_sequence ? p.alibi_slopes.stride[0] : 0;
    params.alibi_head_stride = p.alibi_slopes.stride[per_sequence ? 1 : 0];
  }
  if (!p.sink_logits.empty() && split == nullptr) {
    require_device(p.sink_logits, "sink_logits");
    params.sink_logits = static_cast<const float*>(p.sink_logits.data);
    params.sink_stride = p.sink_logits.stride[0];
  }

  params.window_left = p.mask.kind == MaskKind::none ? -1 : p.mask.window_left;
  params.window_right = p.mask.kind == MaskKind::none ? -1 : p.mask.window_right;
  params.sink_tokens = p.mask.kind == MaskKind::none ? 0 : p.mask.sink_tokens;
  params.bottom_right = p.mask.align == MaskAlign::bottom_right ? 1 : 0;

  bind_fp8_descales(params, p);

  if (p.has_dropout()) {
    params.dropout_seed = p.dropout.seed;
    params.dropout_offset = p.dropout.offset;
    params.dropout_threshold = philox::dropout_threshold(p.dropout.p);
    params.dropout_keep_scale = static_cast<float>(1.0 / (1.0 - p.dropout.p));
  } else {
    params.dropout_keep_scale = 1.0f;
  }
  return params;
}

}  // namespace tilefmha::runtime
