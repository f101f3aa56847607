#include "runtime/bwd_params.hpp"

#include <string>

#include "runtime/device_view.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

[[noreturn]] void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

// A [batch, seq, head, dim] view the kernels move in 16-byte chunks: `granule` elements.
fmha::TokenStrides chunked_strides(const TensorView& view, const std::string& field, DType dtype) {
  require_device_view(view, field, 4);
  if (view.dtype != dtype)
    fail(ErrorKind::invalid_problem, field + ".dtype = " + std::string(to_string(view.dtype)) +
                                         ", expected " + std::string(to_string(dtype)));
  const int64_t granule = 16 / dtype_size(dtype);
  const char* names[] = {"batch", "seq", "head"};
  for (int d = 0; d < 3; ++d) {
    if (view.stride[d] % granule != 0)
      fail(ErrorKind::not_supported, field + ".stride[" + std::to_string(d) + "] (" + names[d] +
                                         ") = " + std::to_string(view.stride[d]) +
                                         ": the GPU kernel needs a multiple of " +
                                         std::to_string(granule) + " elements (16 bytes)");
  }
  if (reinterpret_cast<uintptr_t>(view.data) % 16 != 0)
    fail(ErrorKind::not_supported,
         field + ".data is not 16-byte aligned, which the GPU kernel needs");
  return {view.stride[0], view.stride[1], view.stride[2]};
}

// A dim of dBias that broadcasts: several (b, h, i, j) share its elements.
bool broadcast_dim(const TensorView& view, int d) {
  return view.stride[d] == 0 && view.shape[d] > 1;
}

// bwd.dsink and the plan's dSink partials; both stay null (dSink off) without bwd.dsink.
void bind_dsink(fmha::BwdParams& params, const Problem& p, const BackwardScratch& scratch) {
  const TensorView& dsink = p.bwd.dsink;
  if (dsink.empty()) return;
  require_device_view(dsink, "bwd.dsink", 1);
  if (dsink.dtype != DType::fp32)
    fail(ErrorKind::invalid_problem,
         "bwd.dsink.dtype = " + std::string(to_string(dsink.dtype)) + ", expected fp32");
  if (reinterpret_cast<uintptr_t>(dsink.data) % 4 != 0)
    fail(ErrorKind::not_supported, "bwd.dsink.data is not aligned to its 4-byte elements");
  if (scratch.dsink_partials == nullptr)
    fail(ErrorKind::invalid_problem,
         "bwd.dsink is set but the plan holds no dSink partials (it was planned for a problem "
         "without bwd.dsink)");
  params.dsink = static_cast<float*>(dsink.data);
  params.dsink_stride = dsink.stride[0];
  params.dsink_partials = scratch.dsink_partials;
  params.dsink_partial_count = scratch.dsink_partial_count;
}

}  // namespace

DbiasWrites dbias_writes(const Problem& p) {
  DbiasWrites writes;
  const TensorView& view = p.bwd.dbias;
  if (view.empty()) return writes;
  for (int d = 0; d < view.rank; ++d)
    writes.accumulate = writes.accumulate || broadcast_dim(view, d);
  if (!writes.accumulate) return writes;
  int64_t last = 0;  // offset of the last element
  for (int d = 0; d < view.rank; ++d) last += (view.shape[d] - 1) * view.stride[d];
  writes.zero_bytes = (last + 1) * dtype_size(view.dtype);
  return writes;
}

std::string dbias_refusal(const Problem& p) {
  const TensorView& view = p.bwd.dbias;
  if (view.empty() || !dbias_writes(p).accumulate) return "";
  if (view.dtype != DType::fp32)
    return "bwd.dbias.dtype = " + std::string(to_string(view.dtype)) +
           ": a broadcast dBias (zero strides) is summed with fp32 atomics, so it must be fp32";
  if (p.bwd.deterministic)
    return "bwd.dbias: a broadcast dBias is summed with fp32 atomics, whose order is not "
           "reproducible (deterministic = true)";
  // The launch zeroes the span from the first to the last element: it must hold nothing else.
  int64_t elements = 1, last = 0;
  for (int d = 0; d < view.rank; ++d) {
    if (view.stride[d] < 0)
      return "bwd.dbias.stride[" + std::to_string(d) + "] = " + std::to_string(view.stride[d]) +
             ": the GPU backward needs non-negative strides";
    if (view.stride[d] != 0) elements *= view.shape[d];
    last += (view.shape[d] - 1) * view.stride[d];
  }
  if (elements != last + 1)
    return "bwd.dbias: a broadcast dBias must be dense over its other dims (the GPU backward "
           "zeroes its span before adding to it)";
  return "";
}

fmha::BwdParams make_bwd_params(const Problem& p, const FwdDeviceIndices& indices,
                                const BackwardScratch& scratch) {
  if (!p.is_backward())
    fail(ErrorKind::not_supported, "family = " + std::string(to_string(p.family)) +
                                       ": BwdParams serve the backward families");
  fmha::BwdParams params{};
  params.fwd = make_fwd_params(p, indices, Pipeline::sm80_mma);

  params.d_o = p.bwd.d_o.data;
  params.d_o_strides = chunked_strides(p.bwd.d_o, "bwd.d_o", p.dtype);

  require_device_view(scratch.d, "bwd.d", 3);
  if (scratch.d.dtype != DType::fp32)
    fail(ErrorKind::invalid_problem,
         "bwd.d.dtype = " + std::string(to_string(scratch.d.dtype)) + ", expected fp32");
  params.d = static_cast<float*>(scratch.d.data);
  params.d_batch_stride = scratch.d.stride[0];
  params.d_head_stride = scratch.d.stride[1];
  params.d_seq_stride = scratch.d.stride[2];

  params.dq_acc = static_cast<float*>(scratch.dq_acc.data);
  params.dq_acc_strides = chunked_strides(scratch.dq_acc, "bwd.dq_acc", DType::fp32);
  if (scratch.dq_slices < 1)
    fail(ErrorKind::invalid_argument,
         "dQ accumulator slices = " + std::to_string(scratch.dq_slices) + ": must be at least 1");
  if (scratch.dq_slice_stride % 4 != 0)
    fail(ErrorKind::invalid_argument,
         "dQ accumulator slice stride = " + std::to_string(scratch.dq_slice_stride) +
             ": must be a multiple of 4 floats (16 bytes)");
  params.dq_acc_slices = scratch.dq_slices;
  params.dq_acc_slice_stride = scratch.dq_slice_stride;
  params.dq_acc_swizzled = scratch.dq_swizzled ? 1 : 0;
  params.dq_semaphores = scratch.dq_semaphores;
  params.dq_semaphore_count = scratch.dq_semaphore_count;

  const DType out = p.out_dtype;
  if (!p.bwd.dq.empty()) {
    params.dq = p.bwd.dq.data;
    params.dq_strides = chunked_strides(p.bwd.dq, "bwd.dq", out);
  }
  if (!p.bwd.dk.empty()) {
    params.dk = p.bwd.dk.data;
    params.dk_strides = chunked_strides(p.bwd.dk, "bwd.dk", out);
  }
  if (!p.bwd.dv.empty()) {
    params.dv = p.bwd.dv.data;
    params.dv_strides = chunked_strides(p.bwd.dv, "bwd.dv", out);
  }

  if (!p.bwd.dbias.empty()) {
    const TensorView& dbias = p.bwd.dbias;
    // Any strides (a zero one broadcasts, the key dim's included): dBias is written element by
    // element.
    if (dbias.space != MemorySpace::device)
      fail(ErrorKind::invalid_problem,
           "bwd.dbias is in host memory; the GPU kernel needs a device view");
    if (const std::string why = dbias_refusal(p); !why.empty()) fail(ErrorKind::not_supported, why);
    if (reinterpret_cast<uintptr_t>(dbias.data) % dtype_size(dbias.dtype) != 0)
      fail(ErrorKind::not_supported, "bwd.dbias.data is not aligned to its " +
                                         std::to_string(dtype_size(dbias.dtype)) +
                                         "-byte elements");
    params.dbias = dbias.data;
    params.dbias_kind = dbias.dtype == DType::fp16   ? fmha::ScalarKind::fp16
                        : dbias.dtype == DType::bf16 ? fmha::ScalarKind::bf16
                                                     : fmha::ScalarKind::fp32;
    params.dbias_batch_stride = dbias.stride[0];
    params.dbias_head_stride = dbias.stride[1];
    params.dbias_row_stride = dbias.stride[2];
    params.dbias_col_stride = dbias.stride[3];
    params.dbias_accumulate = dbias_writes(p).accumulate ? 1 : 0;
  }

  bind_dsink(params, p, scratch);

  const bool group = p.mode == Mode::group;
  params.row_batches = group ? 1 : p.batch;
  params.row_seqlen = p.query_rows();
  return params;
}

}  // namespace tilefmha::runtime
