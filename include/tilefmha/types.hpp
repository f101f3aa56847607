// Typed enums of the problem model and their one name table each.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tilefmha {

enum class Family : uint8_t {
  fwd,
  fwd_splitkv,
  fwd_splitkv_combine,
  fwd_pagedkv,
  fwd_appendkv,
  batch_prefill,
  bwd_dot_do_o,
  bwd_dq_dk_dv,
  bwd_convert_dq,
};

// Element types of tensors. The first five are attention data types; the rest
// are index and random-value tensors.
enum class DType : uint8_t { fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int32, int64, uint8 };

// batch: one seqlen_q/seqlen_k for all; group: varlen through seqstart prefix sums.
enum class Mode : uint8_t { batch, group };

// causal is window(-1, 0); window is (window_left, window_right) with -1 unbounded.
enum class MaskKind : uint8_t { none, causal, window };
// top_left: diagonal j == i; bottom_right: diagonal j == i + seqlen_k - seqlen_q.
enum class MaskAlign : uint8_t { top_left, bottom_right };

enum class BiasKind : uint8_t { none, elementwise, alibi };
enum class RopeKind : uint8_t { none, interleaved, half_rotated };
// vllm_block_table: [batch, max_pages] int32; sglang_page_list: indptr[batch+1] + indices.
enum class PageTableKind : uint8_t { none, vllm_block_table, sglang_page_list };
// Paged cache layouts: NHD = [pages, page_size, heads, dim]; HND = [pages, heads, page_size, dim].
enum class KvLayout : uint8_t { nhd, hnd };
enum class Fp8ScaleKind : uint8_t { none, per_tensor, per_block, per_page };

// Target GPU architectures; sm90 means sm_90a (wgmma, setmaxnreg need the `a` target).
enum class Arch : uint8_t { sm80, sm86, sm89, sm90 };

// How a kernel is built. Matmul pipelines serve the attention families; the others are the
// memory-bound kernels of split-KV, append-KV and backward.
enum class Pipeline : uint8_t {
  sm80_mma,        // portable FlashAttention-2 class: mma.sync + cp.async, sm80+
  sm90_ws,         // Hopper warp-specialized: wgmma + TMA + setmaxnreg
  simt_f32,        // accurate fp32 on CUDA cores
  combine,         // split-KV combine
  appendkv,        // append-KV with optional RoPE
  bwd_dot_do_o,    // D = rowsum(dO * O)
  bwd_convert_dq,  // fp32 dQ accumulator -> output dtype
};

// One name table per enum; to_string / parse_enum go through it so names never drift.
template <class E>
struct EnumNames;

#define TILEFMHA_ENUM_NAMES(E, ...)                                               \
  template <>                                                                     \
  struct EnumNames<E> {                                                           \
    static constexpr std::string_view type_name = #E;                             \
    static constexpr auto names = std::to_array<std::string_view>({__VA_ARGS__}); \
  }

TILEFMHA_ENUM_NAMES(Family, "fwd", "fwd_splitkv", "fwd_splitkv_combine", "fwd_pagedkv",
                    "fwd_appendkv", "batch_prefill", "bwd_dot_do_o", "bwd_dq_dk_dv",
                    "bwd_convert_dq");
TILEFMHA_ENUM_NAMES(DType, "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int32", "int64",
                    "uint8");
TILEFMHA_ENUM_NAMES(Mode, "batch", "group");
TILEFMHA_ENUM_NAMES(MaskKind, "none", "causal", "window");
TILEFMHA_ENUM_NAMES(MaskAlign, "top_left", "bottom_right");
TILEFMHA_ENUM_NAMES(BiasKind, "none", "elementwise", "alibi");
TILEFMHA_ENUM_NAMES(RopeKind, "none", "interleaved", "half_rotated");
TILEFMHA_ENUM_NAMES(PageTableKind, "none", "vllm_block_table", "sglang_page_list");
TILEFMHA_ENUM_NAMES(KvLayout, "nhd", "hnd");
TILEFMHA_ENUM_NAMES(Fp8ScaleKind, "none", "per_tensor", "per_block", "per_page");
TILEFMHA_ENUM_NAMES(Arch, "sm80", "sm86", "sm89", "sm90");
TILEFMHA_ENUM_NAMES(Pipeline, "sm80_mma", "sm90_ws", "simt_f32", "combine", "appendkv",
                    "bwd_dot_do_o", "bwd_convert_dq");

template <class E>
constexpr std::string_view to_string(E value) {
  return EnumNames<E>::names[static_cast<size_t>(value)];
}

template <class E>
constexpr std::optional<E> try_parse_enum(std::string_view text) {
  for (size_t i = 0; i < EnumNames<E>::names.size(); ++i)
    if (EnumNames<E>::names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

// Throws tilefmha::Error naming the enum type, the bad text and the accepted names.
template <class E>
E parse_enum(std::string_view text);

template <class E>
constexpr size_t enum_count() {
  return EnumNames<E>::names.size();
}

// Bytes per element of a dtype.
int64_t dtype_size(DType dtype);
bool is_fp8(DType dtype);
// O's dtype unless the caller says otherwise: the input dtype, except bf16 for fp8 inputs.
DType default_out_dtype(DType dtype);
// fp16, bf16, fp32, fp8: types Q/K/V may have.
bool is_attention_dtype(DType dtype);

}  // namespace tilefmha
