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

}  // namespace

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

  const bool group = p.mode == Mode::group;
  params.row_batches = group ? 1 : p.batch;
  params.row_seqlen = p.query_rows();
  return params;
}

}  // namespace tilefmha::runtime
