#include "runtime/combine_params.hpp"

#include <array>
#include <cstdint>
#include <string>

#include "runtime/device_view.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::runtime {
namespace {

[[noreturn]] void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

void require_dtype(const TensorView& view, const std::string& field, bool sixteen_bit_too) {
  const bool ok = view.dtype == DType::fp32 ||
                  (sixteen_bit_too && (view.dtype == DType::fp16 || view.dtype == DType::bf16));
  if (!ok)
    fail(ErrorKind::not_supported, field + ".dtype = " + std::string(to_string(view.dtype)) +
                                       (sixteen_bit_too ? ": the combine takes fp32, fp16 or bf16"
                                                        : ": the combine takes fp32"));
  const int64_t element = dtype_size(view.dtype);
  if (reinterpret_cast<uintptr_t>(view.data) % element != 0)
    fail(ErrorKind::not_supported,
         field + ".data is not aligned to its " + std::to_string(element) + "-byte elements");
}

template <size_t N>
void require_shape(const TensorView& view, const std::string& field,
                   const std::array<int64_t, N>& shape) {
  for (size_t d = 0; d < N; ++d) {
    if (view.shape[d] != shape[d])
      fail(ErrorKind::invalid_problem,
           field + ".shape = " + shape_text(view) + ", expected " + shape_text(shape));
  }
}

fmha::ScalarKind scalar_kind(DType dtype) {
  switch (dtype) {
    case DType::fp16: return fmha::ScalarKind::fp16;
    case DType::bf16: return fmha::ScalarKind::bf16;
    default: return fmha::ScalarKind::fp32;  // checked by require_dtype
  }
}

bool writes_o(Family family) {
  return family == Family::fwd || family == Family::fwd_splitkv_combine ||
         family == Family::fwd_pagedkv || family == Family::batch_prefill;
}

}  // namespace

fmha::CombineParams make_combine_params(const Problem& p, const SplitKv& split) {
  if (!writes_o(p.family))
    fail(ErrorKind::not_supported,
         "family = " + std::string(to_string(p.family)) +
             ": the combine writes O of fwd, fwd_splitkv_combine, fwd_pagedkv or batch_prefill");
  // Group mode packs its sequences along the seq dim of batch entry 0 (as LSE does).
  const bool group = p.mode == Mode::group;
  const int64_t rows_batch = group ? 1 : p.batch;
  const int64_t rows_seq = p.query_rows();

  fmha::CombineParams params{};
  require_device_view(p.o, "o", 4);
  require_dtype(p.o, "o", true);
  params.o = p.o.data;
  params.o_strides = {p.o.stride[0], p.o.stride[1], p.o.stride[2]};
  if (p.return_lse) {
    require_device_view(p.lse, "lse", 3);
    require_dtype(p.lse, "lse", false);
    params.lse = static_cast<float*>(p.lse.data);
    params.lse_batch_stride = p.lse.stride[0];
    params.lse_head_stride = p.lse.stride[1];
    params.lse_seq_stride = p.lse.stride[2];
  }
  if (!p.sink_logits.empty()) {
    require_device_view(p.sink_logits, "sink_logits", 1);
    require_dtype(p.sink_logits, "sink_logits", false);
    params.sink_logits = static_cast<const float*>(p.sink_logits.data);
    params.sink_stride = p.sink_logits.stride[0];
  }

  if (split.num_splits < 1)
    fail(ErrorKind::invalid_problem,
         "split.num_splits = " + std::to_string(split.num_splits) + ": must be at least 1");
  require_device_view(split.o_acc, "split.o_acc", 5);
  require_dtype(split.o_acc, "split.o_acc", true);
  require_shape(split.o_acc, "split.o_acc",
                std::array{split.num_splits, rows_batch, p.nhead_q, rows_seq, p.hdim_v});
  require_device_view(split.lse_acc, "split.lse_acc", 4);
  require_dtype(split.lse_acc, "split.lse_acc", false);
  require_shape(split.lse_acc, "split.lse_acc",
                std::array{split.num_splits, rows_batch, p.nhead_q, rows_seq});
  params.o_acc = split.o_acc.data;
  params.o_acc_kind = scalar_kind(split.o_acc.dtype);
  params.o_acc_split_stride = split.o_acc.stride[0];
  params.o_acc_batch_stride = split.o_acc.stride[1];
  params.o_acc_head_stride = split.o_acc.stride[2];
  params.o_acc_seq_stride = split.o_acc.stride[3];
  params.lse_acc = static_cast<const float*>(split.lse_acc.data);
  params.lse_acc_split_stride = split.lse_acc.stride[0];
  params.lse_acc_batch_stride = split.lse_acc.stride[1];
  params.lse_acc_head_stride = split.lse_acc.stride[2];
  params.lse_acc_seq_stride = split.lse_acc.stride[3];
  params.num_splits = split.num_splits;

  params.batch = rows_batch;
  params.nhead = p.nhead_q;
  params.seqlen = rows_seq;
  params.hdim_v = p.hdim_v;
  return params;
}

}  // namespace tilefmha::runtime
