// validate(): enum ranges, head counts, head dims, dtypes, and the sequence lengths of both
// modes (seqstarts, per-sequence key lengths).
#include "core/validate_detail.hpp"

namespace tilefmha::validation {
namespace {

inline constexpr int64_t kMaxHeadDim = 256;

template <class E>
void check_enum(E value, std::string_view field) {
  if (static_cast<size_t>(value) >= enum_count<E>())
    fail(cat(field, " = ", static_cast<int>(value), " is not a valid ", EnumNames<E>::type_name));
}

void check_head_dim(int64_t hdim, std::string_view field) {
  if (hdim < 1 || hdim > kMaxHeadDim)
    fail(cat(field, " = ", hdim, " is outside [1, ", kMaxHeadDim, "]"));
}

void check_seqstart(const std::vector<int64_t>& starts, std::string_view field, int64_t batch) {
  const auto expected = static_cast<size_t>(batch + 1);
  if (starts.size() != expected)
    fail(cat(field, " has ", starts.size(), " entries but batch = ", batch,
             " needs batch + 1 = ", expected));
  if (starts[0] != 0) fail(cat(field, "[0] = ", starts[0], " must be 0"));
  for (size_t i = 1; i < starts.size(); ++i)
    if (starts[i] < starts[i - 1])
      fail(cat(field, " is not non-decreasing at index ", i, " (", starts[i], " < ", starts[i - 1],
               ")"));
}

// Device prefix sums replace the host ones; only their presence can be checked here.
void check_device_group_mode(const Problem& p) {
  const DeviceIndexArrays& device = p.device_indices;
  if (!p.seqstart_q.empty() || !p.seqstart_k.empty())
    fail(
        cat("seqstart_q/seqstart_k have host entries and device_indices.seqstart_q is set: give "
            "the prefix sums one way"));
  if (device.seqstart_k == nullptr && !p.is_paged())
    fail(
        "device_indices.seqstart_k is null but device_indices.seqstart_q is set: group mode "
        "needs both prefix sums on the device");
  if (p.batch < 1)
    fail(cat("batch = ", p.batch, ": group mode on device indices needs batch >= 1"));
}

void check_group_mode(const Problem& p) {
  if (p.device_indices.seqstart_q != nullptr) return check_device_group_mode(p);
  if (p.seqstart_q.empty())
    fail(cat("seqstart_q is empty but mode = group needs batch + 1 = ", p.batch + 1,
             " prefix sums"));
  if (static_cast<int64_t>(p.seqstart_q.size()) != p.batch + 1)
    fail(cat("batch = ", p.batch, " disagrees with seqstart_q, which has ", p.seqstart_q.size(),
             " entries (", p.seqstart_q.size() - 1, " sequences)"));
  check_seqstart(p.seqstart_q, "seqstart_q", p.batch);
  // A paged cache locates keys through the page table, so K prefix sums are optional there.
  if (!p.seqstart_k.empty() || !p.is_paged()) check_seqstart(p.seqstart_k, "seqstart_k", p.batch);
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.query_length(b) > p.seqlen_q)
      fail(cat("seqlen_q = ", p.seqlen_q, " is smaller than sequence ", b, "'s query length ",
               p.query_length(b), " (seqstart_q): seqlen_q must be the longest"));
}

}  // namespace

void check_enums(const Problem& p) {
  check_enum(p.family, "family");
  check_enum(p.dtype, "dtype");
  check_enum(p.out_dtype, "out_dtype");
  check_enum(p.mode, "mode");
  check_enum(p.mask.kind, "mask.kind");
  check_enum(p.mask.align, "mask.align");
  check_enum(p.bias_kind, "bias_kind");
  check_enum(p.fp8.kind, "fp8.kind");
  check_enum(p.paged.table, "paged.table");
  check_enum(p.paged.layout, "paged.layout");
  check_enum(p.append.rope, "append.rope");
}

void check_sizes(const Problem& p) {
  if (p.batch < 1) fail(cat("batch = ", p.batch, " must be at least 1"));
  if (p.nhead_q < 1) fail(cat("nhead_q = ", p.nhead_q, " must be at least 1"));
  if (p.nhead_k < 1) fail(cat("nhead_k = ", p.nhead_k, " must be at least 1"));
  if (p.nhead_q % p.nhead_k != 0)
    fail(cat("nhead_q = ", p.nhead_q, " is not a multiple of nhead_k = ", p.nhead_k));
  if (p.seqlen_q < 0) fail(cat("seqlen_q = ", p.seqlen_q, " is negative"));
  if (p.seqlen_k < 0) fail(cat("seqlen_k = ", p.seqlen_k, " is negative"));
  check_head_dim(p.hdim_q, "hdim_q");
  check_head_dim(p.hdim_v, "hdim_v");
  if (p.append.seqlen_knew < 0)
    fail(cat("append.seqlen_knew = ", p.append.seqlen_knew, " is negative"));

  if (!is_attention_dtype(p.dtype))
    fail(cat("dtype = ", to_string(p.dtype),
             " is not an attention dtype (fp32, fp16, bf16, fp8_e4m3, fp8_e5m2)"));
  if (is_fp8(p.dtype)) {
    if (p.out_dtype != DType::bf16 && p.out_dtype != DType::fp32)
      fail(cat("out_dtype = ", to_string(p.out_dtype), " but fp8 dtype ", to_string(p.dtype),
               " needs out_dtype bf16 or fp32"));
  } else if (p.out_dtype != p.dtype) {
    fail(cat("out_dtype = ", to_string(p.out_dtype), " differs from dtype = ", to_string(p.dtype),
             " (only fp8 inputs may have another output dtype)"));
  }
}

void check_sequences(const Problem& p) {
  if (p.mode == Mode::group) {
    check_group_mode(p);
  } else {
    if (!p.seqstart_q.empty())
      fail(cat("seqstart_q has ", p.seqstart_q.size(), " entries but mode = batch ignores it"));
    if (!p.seqstart_k.empty())
      fail(cat("seqstart_k has ", p.seqstart_k.size(), " entries but mode = batch ignores it"));
    if (p.device_indices.seqstart_q != nullptr || p.device_indices.seqstart_k != nullptr)
      fail("device_indices.seqstart_q/seqstart_k are set but mode = batch ignores them");
  }
  if (p.device_indices.seqlen_k != nullptr && !p.seqlen_k_per_batch.empty())
    fail(cat("seqlen_k_per_batch has ", p.seqlen_k_per_batch.size(),
             " host entries and device_indices.seqlen_k is set: give the key lengths one way"));

  const auto& lengths = p.seqlen_k_per_batch;
  if (!lengths.empty()) {
    if (static_cast<int64_t>(lengths.size()) != p.batch)
      fail(cat("seqlen_k_per_batch has ", lengths.size(), " entries but batch = ", p.batch));
    for (size_t b = 0; b < lengths.size(); ++b)
      if (lengths[b] < 0) fail(cat("seqlen_k_per_batch[", b, "] = ", lengths[b], " is negative"));
  }
  // Bias, random values and split partials are sized by seqlen_k, so it must cover every sequence.
  for (int64_t b = 0; b < p.batch; ++b)
    if (p.key_length(b) > p.seqlen_k)
      fail(cat("seqlen_k = ", p.seqlen_k, " is smaller than sequence ", b, "'s key length ",
               p.key_length(b), ": seqlen_k must be the longest"));
}

}  // namespace tilefmha::validation
