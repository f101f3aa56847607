// The shared view checker of validate() and the shape rules of the token-major views.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "core/validate_detail.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::validation {

void fail(const std::string& message) {
  throw Error(ErrorKind::invalid_problem, message);
}

std::string number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

namespace {

std::string join_dims(const std::vector<DimRule>& dims, bool names) {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d > 0) text += ", ";
    if (names) {
      text += dims[d].name;
    } else {
      if (dims[d].at_least) text += ">=";
      text += std::to_string(dims[d].size);
    }
  }
  return text + "]";
}

std::string join_shape(const TensorView& view) {
  std::string text = "[";
  for (int d = 0; d < view.rank; ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(view.shape[d]);
  }
  return text + "]";
}

bool dtype_accepted(DType dtype, const std::vector<DType>& accepted) {
  for (DType candidate : accepted)
    if (candidate == dtype) return true;
  return false;
}

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string text;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) text += i + 1 == dtypes.size() ? " or " : ", ";
    text += to_string(dtypes[i]);
  }
  return text;
}

bool shape_matches(const TensorView& view, const std::vector<DimRule>& dims) {
  if (view.rank != static_cast<int>(dims.size())) return false;
  for (int d = 0; d < view.rank; ++d) {
    const DimRule& rule = dims[d];
    if (rule.at_least ? view.shape[d] < rule.size : view.shape[d] != rule.size) return false;
  }
  return true;
}

}  // namespace

void check_view(const TensorView& view, const ViewRule& rule) {
  if (!present(view)) return;
  const std::string& f = rule.field;
  if (static_cast<size_t>(view.dtype) >= enum_count<DType>())
    fail(cat(f, ".dtype = ", static_cast<int>(view.dtype), " is not a valid DType"));
  if (view.space != MemorySpace::host && view.space != MemorySpace::device)
    fail(cat(f, ".space = ", static_cast<int>(view.space), " is neither host nor device"));
  if (view.rank < 0 || view.rank > kMaxRank)
    fail(cat(f, ".rank = ", view.rank, " is outside [0, ", kMaxRank, "]"));
  if (!shape_matches(view, rule.shape))
    fail(cat(f, ".shape = ", join_shape(view), " does not match ", join_dims(rule.shape, true),
             " = ", join_dims(rule.shape, false)));
  if (!dtype_accepted(view.dtype, rule.dtypes))
    fail(cat(f, ".dtype = ", to_string(view.dtype), " but ", f, " must be ",
             dtype_list(rule.dtypes)));
  for (int d = 0; d < view.rank; ++d) {
    const int64_t stride = view.stride[d];
    if (stride < 0) fail(cat(f, ".stride[", d, "] = ", stride, " is negative"));
    const bool last = d + 1 == view.rank;
    const bool broadcast = stride == 0 && rule.broadcastable;
    // A dimension of size 1 is never stepped, so its stride does not matter.
    if (last && view.shape[d] > 1 && stride != 1 && !broadcast)
      fail(cat(f, ".stride[", d, "] = ", stride,
               " but the last dimension must be contiguous (stride 1)"));
    if (rule.written && !rule.broadcastable && stride == 0 && view.shape[d] > 1)
      fail(cat(f, ".stride[", d, "] = 0 broadcasts an output of ", view.shape[d],
               " elements onto one address"));
  }
  // Offsets are int64 element counts; a view reaching past 2^63 bytes would wrap them.
  if (!extent_bytes(view))
    fail(cat("problem too large: ", f, ".shape = ", join_shape(view),
             " with its strides spans more bytes than int64 holds"));
}

void require_view(const TensorView& view, const ViewRule& rule, const std::string& why) {
  if (present(view)) return check_view(view, rule);
  const bool nothing_to_point_at =
      view.rank == static_cast<int>(rule.shape.size()) && view.rank > 0 && view.numel() == 0;
  if (!nothing_to_point_at) fail(cat(rule.field, " is missing (null data) but ", why));
  if (!shape_matches(view, rule.shape))
    fail(cat(rule.field, ".shape = ", join_shape(view), " does not match ",
             join_dims(rule.shape, true), " = ", join_dims(rule.shape, false)));
}

void forbid_view(const TensorView& view, std::string_view field, const std::string& reason) {
  if (present(view)) fail(cat(field, " is set (non-null data) but ", reason));
}

std::vector<DimRule> query_rows(const Problem& p) {
  if (p.mode == Mode::group) return {{"1", 1}, {"total_q", p.total_q(), true}};
  return {{"batch", p.batch}, {"seqlen_q", p.seqlen_q}};
}

std::vector<DimRule> key_rows(const Problem& p) {
  if (p.mode == Mode::group)
    return {{"1", 1}, {"total_k", p.seqstart_k.empty() ? 0 : p.seqstart_k.back(), true}};
  // With per-sequence lengths the K/V views are caches: any capacity that holds every sequence.
  if (!p.seqlen_k_per_batch.empty() || p.family == Family::fwd_appendkv) {
    int64_t needed = 0;
    for (int64_t b = 0; b < p.batch; ++b) needed = std::max(needed, keys_to_hold(p, b));
    return {{"batch", p.batch}, {"cache capacity", needed, true}};
  }
  return {{"batch", p.batch}, {"seqlen_k", p.seqlen_k}};
}

ViewRule lse_rule(const Problem& p, std::string field) {
  if (p.mode == Mode::group)
    return {std::move(field),
            {DType::fp32},
            {{"1", 1}, {"nhead_q", p.nhead_q}, {"total_q", p.total_q(), true}}};
  return {std::move(field),
          {DType::fp32},
          {{"batch", p.batch}, {"nhead_q", p.nhead_q}, {"seqlen_q", p.seqlen_q}}};
}

std::vector<DimRule> score_dims(const Problem& p) {
  return {{"batch", p.batch},
          {"nhead_q", p.nhead_q},
          {"seqlen_q", p.seqlen_q},
          {"seqlen_k", p.seqlen_k}};
}

int64_t keys_to_hold(const Problem& p, int64_t b) {
  const int64_t appended = p.family == Family::fwd_appendkv ? p.append.seqlen_knew : 0;
  return p.key_length(b) + appended;
}

std::vector<DType> float_dtypes() {
  return {DType::fp32, DType::fp16, DType::bf16};
}

void check_memory_space(const Problem& p) {
  const std::pair<const char*, const TensorView*> views[] = {
      {"q", &p.q},
      {"k", &p.k},
      {"v", &p.v},
      {"o", &p.o},
      {"lse", &p.lse},
      {"bias", &p.bias},
      {"alibi_slopes", &p.alibi_slopes},
      {"sink_logits", &p.sink_logits},
      {"dropout.random_values", &p.dropout.random_values},
      {"fp8.q_block", &p.fp8.q_block},
      {"fp8.k_block", &p.fp8.k_block},
      {"fp8.v_block", &p.fp8.v_block},
      {"fp8.k_page", &p.fp8.k_page},
      {"fp8.v_page", &p.fp8.v_page},
      {"append.k_new", &p.append.k_new},
      {"append.v_new", &p.append.v_new},
      {"append.rope_cos", &p.append.rope_cos},
      {"append.rope_sin", &p.append.rope_sin},
      {"split.o_acc", &p.split.o_acc},
      {"split.lse_acc", &p.split.lse_acc},
      {"bwd.d_o", &p.bwd.d_o},
      {"bwd.dq", &p.bwd.dq},
      {"bwd.dk", &p.bwd.dk},
      {"bwd.dv", &p.bwd.dv},
      {"bwd.dbias", &p.bwd.dbias},
      {"bwd.d", &p.bwd.d},
      {"bwd.dq_acc", &p.bwd.dq_acc},
      {"bwd.dsink", &p.bwd.dsink},
  };
  const char* first_name = nullptr;
  MemorySpace first_space = MemorySpace::host;
  for (const auto& [name, view] : views) {
    if (!present(*view)) continue;
    if (first_name == nullptr) {
      first_name = name;
      first_space = view->space;
    } else if (view->space != first_space) {
      auto space_name = [](MemorySpace s) { return s == MemorySpace::host ? "host" : "device"; };
      fail(cat(name, ".space = ", space_name(view->space), " differs from ", first_name,
               ".space = ", space_name(first_space),
               ": every view of one problem must live in one memory space"));
    }
  }
}

}  // namespace tilefmha::validation
