#include "problem_handle.hpp"

#include <array>
#include <functional>
#include <string_view>
#include <utility>

#include "dlpack_views.hpp"
#include "features.hpp"
#include "host_views.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::python {
namespace py = pybind11;

namespace {

using Attach = void (*)(ProblemBuilder&, const TensorView&);

// Views that live inside a sub-struct are set by copying the struct, since the builder takes
// those structs whole.
void attach_append(ProblemBuilder& b, TensorView AppendKv::*member, const TensorView& v) {
  AppendKv append = b.peek().append;
  append.*member = v;
  b.append(std::move(append));
}

void attach_split(ProblemBuilder& b, TensorView SplitKv::*member, const TensorView& v) {
  SplitKv split = b.peek().split;
  split.*member = v;
  b.splits(split.num_splits, split.o_acc, split.lse_acc);
}

void attach_backward(ProblemBuilder& b, TensorView Backward::*member, const TensorView& v) {
  Backward backward = b.peek().bwd;
  backward.*member = v;
  b.backward(std::move(backward));
}

void attach_fp8(ProblemBuilder& b, TensorView Fp8Scales::*member, const TensorView& v) {
  Fp8Scales scales = b.peek().fp8;
  scales.*member = v;
  b.fp8_scales(std::move(scales));
}

struct TensorField {
  std::string_view name;
  Attach attach;
};

// One row per tensor the Python layer may attach; names are the engine's field names.
constexpr std::array kTensorFields = {
    TensorField{"q", [](ProblemBuilder& b, const TensorView& v) { b.q(v); }},
    TensorField{"k", [](ProblemBuilder& b, const TensorView& v) { b.k(v); }},
    TensorField{"v", [](ProblemBuilder& b, const TensorView& v) { b.v(v); }},
    TensorField{"o", [](ProblemBuilder& b, const TensorView& v) { b.o(v); }},
    TensorField{"lse", [](ProblemBuilder& b, const TensorView& v) { b.lse(v); }},
    TensorField{"bias", [](ProblemBuilder& b, const TensorView& v) { b.bias(v); }},
    TensorField{"alibi_slopes", [](ProblemBuilder& b, const TensorView& v) { b.alibi(v); }},
    TensorField{"sink_logits", [](ProblemBuilder& b, const TensorView& v) { b.sink_logits(v); }},
    TensorField{"split.o_acc", [](ProblemBuilder& b,
                                  const TensorView& v) { attach_split(b, &SplitKv::o_acc, v); }},
    TensorField{
        "split.lse_acc",
        [](ProblemBuilder& b, const TensorView& v) { attach_split(b, &SplitKv::lse_acc, v); }},
    TensorField{"append.k_new", [](ProblemBuilder& b,
                                   const TensorView& v) { attach_append(b, &AppendKv::k_new, v); }},
    TensorField{"append.v_new", [](ProblemBuilder& b,
                                   const TensorView& v) { attach_append(b, &AppendKv::v_new, v); }},
    TensorField{
        "append.rope_cos",
        [](ProblemBuilder& b, const TensorView& v) { attach_append(b, &AppendKv::rope_cos, v); }},
    TensorField{
        "append.rope_sin",
        [](ProblemBuilder& b, const TensorView& v) { attach_append(b, &AppendKv::rope_sin, v); }},
    TensorField{"bwd.d_o", [](ProblemBuilder& b,
                              const TensorView& v) { attach_backward(b, &Backward::d_o, v); }},
    TensorField{"bwd.dq", [](ProblemBuilder& b,
                             const TensorView& v) { attach_backward(b, &Backward::dq, v); }},
    TensorField{"bwd.dk", [](ProblemBuilder& b,
                             const TensorView& v) { attach_backward(b, &Backward::dk, v); }},
    TensorField{"bwd.dv", [](ProblemBuilder& b,
                             const TensorView& v) { attach_backward(b, &Backward::dv, v); }},
    TensorField{"bwd.dbias", [](ProblemBuilder& b,
                                const TensorView& v) { attach_backward(b, &Backward::dbias, v); }},
    TensorField{"bwd.dsink", [](ProblemBuilder& b,
                                const TensorView& v) { attach_backward(b, &Backward::dsink, v); }},
    TensorField{"fp8.q_block", [](ProblemBuilder& b,
                                  const TensorView& v) { attach_fp8(b, &Fp8Scales::q_block, v); }},
    TensorField{"fp8.k_block", [](ProblemBuilder& b,
                                  const TensorView& v) { attach_fp8(b, &Fp8Scales::k_block, v); }},
    TensorField{"fp8.v_block", [](ProblemBuilder& b,
                                  const TensorView& v) { attach_fp8(b, &Fp8Scales::v_block, v); }},
    TensorField{"fp8.k_page", [](ProblemBuilder& b,
                                 const TensorView& v) { attach_fp8(b, &Fp8Scales::k_page, v); }},
    TensorField{"fp8.v_page", [](ProblemBuilder& b,
                                 const TensorView& v) { attach_fp8(b, &Fp8Scales::v_page, v); }},
};

Attach attach_for(std::string_view field) {
  for (const TensorField& entry : kTensorFields)
    if (entry.name == field) return entry.attach;
  std::string known;
  for (const TensorField& entry : kTensorFields)
    known += (known.empty() ? "" : ", ") + std::string(entry.name);
  throw Error(ErrorKind::invalid_argument,
              "unknown tensor field '" + std::string(field) + "' (known: " + known + ")");
}

// `view` read as `as_dtype` (attach_host's rule): fp8 codes come as raw bytes from producers
// without an fp8 type (NumPy), so uint8 storage takes the call's fp8 dtype; other storage must
// already be of it, so that float data is never read as codes.
TensorView read_as(TensorView view, const std::string& as_dtype, const std::string& field) {
  if (as_dtype.empty()) return view;
  const DType codes = parse_enum<DType>(as_dtype);
  if (!is_fp8(codes))
    throw Error(ErrorKind::invalid_argument,
                field + ": as_dtype = " + as_dtype + " but only fp8 codes are read from bytes");
  if (view.dtype != DType::uint8 && view.dtype != codes)
    throw Error(ErrorKind::invalid_argument,
                field + " holds " + std::string(to_string(view.dtype)) + " data, not " + as_dtype +
                    " codes (uint8 storage or an " + as_dtype + " dtype)");
  view.dtype = codes;
  return view;
}

// A contiguous fp32 view of `shape` over `storage`, or an empty view when `like` is absent
// (validation then names the missing input).
TensorView scratch_like(const TensorView& like, std::vector<float>& storage) {
  if (like.empty()) return {};
  TensorView view = like;
  view.dtype = DType::fp32;
  int64_t elements = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.stride[d] = elements;
    elements *= view.shape[d];
  }
  storage.assign(static_cast<size_t>(elements), 0.0f);
  view.data = storage.data();
  return view;
}

}  // namespace

ProblemHandle::ProblemHandle(const std::string& family) : builder_(parse_enum<Family>(family)) {}

void ProblemHandle::set_dtype(const std::string& dtype) {
  builder_.dtype(parse_enum<DType>(dtype));
}

void ProblemHandle::set_shape(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_q,
                              int64_t seqlen_k, int64_t hdim_q, int64_t hdim_v) {
  builder_.shape(batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_q, hdim_v);
}

void ProblemHandle::set_group(std::vector<int64_t> seqstart_q, std::vector<int64_t> seqstart_k) {
  builder_.group(std::move(seqstart_q), std::move(seqstart_k));
}

void ProblemHandle::set_group_on_device(uintptr_t seqstart_q, uintptr_t seqstart_k, int64_t batch,
                                        int64_t max_seqlen_q, int64_t max_seqlen_k) {
  builder_.group_on_device(reinterpret_cast<const int64_t*>(seqstart_q),
                           reinterpret_cast<const int64_t*>(seqstart_k), batch, max_seqlen_q,
                           max_seqlen_k);
}

void ProblemHandle::set_key_lengths(std::vector<int64_t> seqlen_k_per_batch) {
  builder_.key_lengths(std::move(seqlen_k_per_batch));
}

void ProblemHandle::set_features(const py::tuple& features) {
  apply(builder_, read_scalar_features(features));
}

void ProblemHandle::set_block_table(const std::string& layout, int64_t page_size, int64_t num_pages,
                                    std::vector<int32_t> block_table, int64_t max_pages_per_seq) {
  PagedKv paged;
  paged.table = PageTableKind::vllm_block_table;
  paged.layout = parse_enum<KvLayout>(layout);
  paged.page_size = page_size;
  paged.num_pages = num_pages;
  paged.block_table = std::move(block_table);
  paged.max_pages_per_seq = max_pages_per_seq;
  builder_.paged(std::move(paged));
}

void ProblemHandle::set_block_table_on_device(const std::string& layout, int64_t page_size,
                                              int64_t num_pages, uintptr_t block_table,
                                              int64_t max_pages_per_seq) {
  set_block_table(layout, page_size, num_pages, {}, max_pages_per_seq);
  builder_.block_table_on_device(reinterpret_cast<const int32_t*>(block_table));
}

void ProblemHandle::set_page_list_on_device(const std::string& layout, int64_t page_size,
                                            int64_t num_pages, uintptr_t page_indptr,
                                            uintptr_t page_indices) {
  set_page_list(layout, page_size, num_pages, {}, {});
  builder_.page_list_on_device(reinterpret_cast<const int64_t*>(page_indptr),
                               reinterpret_cast<const int32_t*>(page_indices));
}

void ProblemHandle::set_key_lengths_on_device(uintptr_t seqlen_k_per_batch, int64_t max_seqlen_k) {
  builder_.key_lengths_on_device(reinterpret_cast<const int64_t*>(seqlen_k_per_batch));
  const Problem& current = builder_.peek();
  builder_.shape(current.batch, current.nhead_q, current.nhead_k, current.seqlen_q, max_seqlen_k,
                 current.hdim_q, current.hdim_v);
}

void ProblemHandle::set_page_list(const std::string& layout, int64_t page_size, int64_t num_pages,
                                  std::vector<int64_t> page_indptr,
                                  std::vector<int32_t> page_indices) {
  PagedKv paged;
  paged.table = PageTableKind::sglang_page_list;
  paged.layout = parse_enum<KvLayout>(layout);
  paged.page_size = page_size;
  paged.num_pages = num_pages;
  paged.page_indptr = std::move(page_indptr);
  paged.page_indices = std::move(page_indices);
  builder_.paged(std::move(paged));
}

void ProblemHandle::set_rope_base(double theta, std::vector<int64_t> position_offsets) {
  AppendKv append = builder_.peek().append;
  append.rope_theta = theta;
  append.rope_position_offsets = std::move(position_offsets);
  builder_.append(std::move(append));
}

void ProblemHandle::set_rope_offsets_on_device(uintptr_t position_offsets) {
  builder_.rope_offsets_on_device(reinterpret_cast<const int64_t*>(position_offsets));
}

void ProblemHandle::set_append(int64_t seqlen_knew, const std::string& rope, int64_t rotary_dim,
                               bool rotate_q) {
  AppendKv append = builder_.peek().append;
  append.seqlen_knew = seqlen_knew;
  append.rope = parse_enum<RopeKind>(rope);
  append.rotary_dim = rotary_dim;
  append.rotate_q = rotate_q;
  builder_.append(std::move(append));
}

void ProblemHandle::set_deterministic(bool deterministic) {
  Backward backward = builder_.peek().bwd;
  backward.deterministic = deterministic;
  builder_.backward(std::move(backward));
}

void ProblemHandle::set_fp8(const std::string& kind, double q_descale, double k_descale,
                            double v_descale) {
  // The views attached so far stay: only the kind and the factors change.
  Fp8Scales scales = builder_.peek().fp8;
  scales.kind = parse_enum<Fp8ScaleKind>(kind);
  scales.q_descale = q_descale;
  scales.k_descale = k_descale;
  scales.v_descale = v_descale;
  builder_.fp8_scales(std::move(scales));
}

void ProblemHandle::set_out_dtype(const std::string& dtype) {
  builder_.out_dtype(parse_enum<DType>(dtype));
}

void ProblemHandle::attach_host(const std::string& field, const py::array& array, bool writable,
                                const std::string& as_dtype) {
  const Attach attach = attach_for(field);
  attach(builder_, read_as(host_view(array, field, writable), as_dtype, field));
  owners_.push_back(array);
}

void ProblemHandle::attach_device(const std::string& field, const py::capsule& capsule,
                                  bool writable, const std::string& as_dtype) {
  attach_device_view(field, device_view(capsule, field, writable), capsule, as_dtype);
}

void ProblemHandle::attach_torch(const std::string& field, uintptr_t data, const std::string& dtype,
                                 const std::vector<int64_t>& shape,
                                 const std::vector<int64_t>& strides, int device,
                                 const py::object& owner, const std::string& as_dtype) {
  attach_device_view(field, device_view(data, dtype, shape, strides, device, field), owner,
                     as_dtype);
}

void ProblemHandle::attach_device_view(const std::string& field, DeviceTensor tensor,
                                       const py::object& owner, const std::string& as_dtype) {
  const Attach attach = attach_for(field);
  if (device_ && *device_ != tensor.device_ordinal)
    throw Error(ErrorKind::invalid_argument,
                field + " is on cuda:" + std::to_string(tensor.device_ordinal) +
                    " but the tensors before it are on cuda:" + std::to_string(*device_));
  tensor.view = read_as(tensor.view, as_dtype, field);
  device_ = tensor.device_ordinal;
  attach(builder_, tensor.view);
  owners_.push_back(owner);
}

void ProblemHandle::run_reference() {
  if (device_)
    throw Error(ErrorKind::invalid_argument,
                "the CPU reference reads host memory, but tensors of this problem are on cuda:" +
                    std::to_string(*device_));
  Problem problem = builder_.peek();
  std::vector<float> d, dq_acc;
  if (problem.is_backward()) {
    // D is sized like LSE: without LSE the first stage would blame the missing D, which the
    // caller never attaches, instead of the LSE the caller forgot.
    if (problem.lse.empty() && problem.lse.rank == 0)
      throw Error(ErrorKind::invalid_problem,
                  "lse is missing (null data) but the backward reads it (the forward's LSE)");
    // D has LSE's shape and the dQ accumulator Q's; both are internal to the three stages.
    problem.bwd.d = scratch_like(problem.lse, d);
    problem.bwd.dq_acc = scratch_like(problem.q, dq_acc);
  }
  py::gil_scoped_release release;
  if (problem.is_backward())
    reference::backward(problem);
  else
    reference::run(problem);
}

}  // namespace tilefmha::python
