#include "runtime/appendkv_params.hpp"

#include <cmath>
#include <string>

#include "codegen/appendkv.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

[[noreturn]] void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

// The kernel moves 16-byte chunks where the view allows and single elements elsewhere, so any
// element-aligned view with a contiguous head dim works.
fmha::TokenStrides strides_of(const TensorView& view, const char* field) {
  if (view.empty()) fail(ErrorKind::invalid_problem, std::string(field) + " is not set");
  if (view.space != MemorySpace::device)
    fail(ErrorKind::invalid_problem,
         std::string(field) + " is in host memory; the GPU kernel needs a device view");
  if (view.stride[3] != 1)
    fail(ErrorKind::not_supported, std::string(field) +
                                       ".stride[3] = " + std::to_string(view.stride[3]) +
                                       ": the GPU kernel needs a contiguous head dim");
  if (reinterpret_cast<uintptr_t>(view.data) % dtype_size(view.dtype) != 0)
    fail(ErrorKind::not_supported, std::string(field) + ".data is not aligned to its " +
                                       std::to_string(dtype_size(view.dtype)) + "-byte elements");
  return {view.stride[0], view.stride[1], view.stride[2]};
}

const float* rope_table(const TensorView& view, const char* field, long long& row_stride) {
  if (view.space != MemorySpace::device)
    fail(ErrorKind::invalid_problem,
         std::string(field) + " is in host memory; the GPU kernel needs a device view");
  if (view.stride[1] != 1)
    fail(ErrorKind::not_supported, std::string(field) +
                                       ".stride[1] = " + std::to_string(view.stride[1]) +
                                       ": the GPU kernel needs contiguous frequencies");
  row_stride = view.stride[0];
  return static_cast<const float*>(view.data);
}

void bind_pages(fmha::AppendKvParams& params, const Problem& p, const FwdDeviceIndices& indices) {
  params.page_size = p.paged.page_size;
  switch (p.paged.table) {
    case PageTableKind::none: return;
    case PageTableKind::vllm_block_table:
      if (indices.block_table == nullptr)
        fail(ErrorKind::invalid_argument, "paged.block_table has no device copy");
      params.page_table = indices.block_table;
      params.page_table_stride = p.paged.max_pages_per_seq;
      return;
    case PageTableKind::sglang_page_list:
      if (indices.page_indices == nullptr || indices.page_indptr == nullptr)
        fail(ErrorKind::invalid_argument,
             "paged.page_indptr / paged.page_indices have no device copy");
      params.page_table = indices.page_indices;
      params.page_indptr = reinterpret_cast<const long long*>(indices.page_indptr);
      return;
  }
}

// A quantizing append's new-token type and the page scales it reads and updates: device fp32
// [num_pages, nhead_k] views, K's and V's with the same strides.
void bind_page_scales(fmha::AppendKvParams& params, const Problem& p) {
  params.new_bf16 = p.append.k_new.dtype == DType::bf16 ? 1 : 0;
  const TensorView* tables[] = {&p.fp8.k_page, &p.fp8.v_page};
  const char* names[] = {"fp8.k_page", "fp8.v_page"};
  for (int n = 0; n < 2; ++n) {
    if (tables[n]->space != MemorySpace::device)
      fail(ErrorKind::invalid_problem,
           std::string(names[n]) + " is in host memory; the GPU kernel updates a device view");
  }
  if (p.fp8.k_page.stride[0] != p.fp8.v_page.stride[0] ||
      p.fp8.k_page.stride[1] != p.fp8.v_page.stride[1])
    fail(ErrorKind::not_supported,
         "fp8.k_page and fp8.v_page have different strides; the GPU kernel takes one layout");
  params.k_page_scales = static_cast<float*>(p.fp8.k_page.data);
  params.v_page_scales = static_cast<float*>(p.fp8.v_page.data);
  params.scale_page_stride = p.fp8.k_page.stride[0];
  params.scale_head_stride = p.fp8.k_page.stride[1];
}

fmha::RopeMode rope_mode(RopeKind rope) {
  switch (rope) {
    case RopeKind::none: return fmha::RopeMode::none;
    case RopeKind::interleaved: return fmha::RopeMode::interleaved;
    case RopeKind::half_rotated: return fmha::RopeMode::half_rotated;
  }
  return fmha::RopeMode::none;
}

}  // namespace

fmha::AppendKvParams make_appendkv_params(const Problem& p, const FwdDeviceIndices& indices,
                                          int64_t* key_lengths_after) {
  if (p.family != Family::fwd_appendkv)
    fail(ErrorKind::invalid_argument, "family = " + std::string(to_string(p.family)) +
                                          ": AppendKvParams serve fwd_appendkv only");
  const AppendKv& a = p.append;
  fmha::AppendKvParams params{};
  params.k_new = a.k_new.data;
  params.v_new = a.v_new.data;
  params.k_new_strides = strides_of(a.k_new, "append.k_new");
  params.v_new_strides = strides_of(a.v_new, "append.v_new");
  params.k = p.k.data;
  params.v = p.v.data;
  params.k_strides = strides_of(p.k, "k");
  params.v_strides = strides_of(p.v, "v");
  const bool rotates_q = a.rotate_q && a.rope != RopeKind::none;
  if (rotates_q) {
    params.q = p.q.data;
    params.q_strides = strides_of(p.q, "q");
  }
  params.batch = p.batch;
  params.nhead_q = p.nhead_q;
  params.nhead_k = p.nhead_k;
  params.seqlen_q = p.seqlen_q;
  params.seqlen_knew = a.seqlen_knew;
  params.hdim_q = p.hdim_q;
  params.hdim_v = p.hdim_v;
  if (indices.seqlen_k_per_batch == nullptr)
    fail(ErrorKind::invalid_argument, "seqlen_k_per_batch has no device copy");
  params.seqlen_k = reinterpret_cast<const long long*>(indices.seqlen_k_per_batch);
  params.seqlen_k_after = reinterpret_cast<long long*>(key_lengths_after);
  bind_pages(params, p, indices);

  params.rope = rope_mode(a.rope);
  params.rotary_dim = a.rotary_dim;
  params.rope_theta = a.rope_theta;
  params.rope_ratio = a.rope_theta > 0 && a.rotary_dim > 0
                          ? std::pow(a.rope_theta, -2.0 / static_cast<double>(a.rotary_dim))
                          : 0.0;
  if (a.rope != RopeKind::none && a.rope_theta <= 0) {
    params.rope_cos = rope_table(a.rope_cos, "append.rope_cos", params.rope_cos_stride);
    params.rope_sin = rope_table(a.rope_sin, "append.rope_sin", params.rope_sin_stride);
  }
  if (!a.rope_position_offsets.empty() && indices.rope_position_offsets == nullptr)
    fail(ErrorKind::invalid_argument, "append.rope_position_offsets has no device copy");
  params.position_offsets = reinterpret_cast<const long long*>(indices.rope_position_offsets);

  const codegen::AppendKvRuns runs = codegen::appendkv_runs(p);
  params.k_run = runs.k_run;
  params.k_groups = runs.k_groups;
  params.q_run = runs.q_run;
  params.q_groups = runs.q_groups;
  params.segments = runs.segments;
  if (quantizes_append(p)) bind_page_scales(params, p);
  return params;
}

}  // namespace tilefmha::runtime
