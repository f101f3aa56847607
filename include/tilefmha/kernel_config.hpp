// A kernel's identity. Its fields are declared once, in kKernelConfigFields, and that table
// drives the canonical name, JSON, CSV columns, the filter language, hashing and equality.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>

#include "tilefmha/types.hpp"

namespace tilefmha {

struct KernelConfig {
  Family family = Family::fwd;
  Arch arch = Arch::sm90;
  DType dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  Mode mode = Mode::batch;
  Pipeline pipeline = Pipeline::sm80_mma;
  int32_t hdim_q = 128;
  int32_t hdim_v = 128;
  // Tile: block_m queries x block_n keys, block_k the reduction step over hdim.
  int32_t block_m = 128;
  int32_t block_n = 64;
  int32_t block_k = 32;
  int32_t warps = 4;
  int32_t stages = 2;
  // Padding variants: the kernel handles lengths / head dims that are not tile multiples.
  bool pad_seqlen_q = false;
  bool pad_seqlen_k = false;
  bool pad_hdim_q = false;
  bool pad_hdim_v = false;
  // Feature traits.
  MaskKind mask = MaskKind::none;
  BiasKind bias = BiasKind::none;
  bool lse = false;
  bool dropout = false;
  bool softcap = false;
  bool sink_logit = false;
  PageTableKind page_table = PageTableKind::none;
  int32_t page_size = 0;  // 0: any (runtime); else the page size the kernel is specialized for
  KvLayout kv_layout = KvLayout::nhd;
  RopeKind rope = RopeKind::none;
  Fp8ScaleKind fp8_scale = Fp8ScaleKind::none;
  bool deterministic = false;
  bool dbias = false;
  // Launch form, not a trait: the CTAs loop over tiles on a persistent grid of one CTA per SM
  // (sm90_ws). Never enumerated; the dispatcher derives it from an enumerated kernel where a
  // persistent grid pays for the problem (codegen::sm90_persistent_grid_pays, and
  // codegen::bwd_sm90_persistent_grid_pays for the backward).
  bool persistent = false;
  // Launch form, not a trait: the query heads of a GQA group share one tile (block_m / g query
  // positions x g heads), for short query rows (sm90_ws). Derived by the dispatcher like
  // `persistent`, never enumerated.
  bool pack_gqa = false;
  // Launch form, not a trait: the epilogue merges the tile's result into the state O and LSE
  // already hold (Problem::accumulate), sm90_ws only. Derived from the problem by the
  // dispatcher, never enumerated.
  bool accumulate = false;
  // Launch form, not a trait: split-KV decode tiles whose queries fit 16 rows run on warp MMAs
  // instead of wgmma (sm90_ws, fmha/fwd_sm90_warp_decode.h). Derived by the dispatcher where it
  // measured faster (runtime::warp_decode_pays), never enumerated.
  bool warp_decode = false;

  bool operator==(const KernelConfig&) const = default;

  // Canonical name, e.g. "fwd.sm90.bf16.batch.sm80_mma.hq128.hv128.m128.n64.k32.w4.s2.mask-causal"
  // Fields at their default value after the tile are left out; parse_name inverts it.
  std::string name() const;
  static KernelConfig parse_name(std::string_view name);
  // An identifier-safe form of name() for symbols and file names.
  std::string symbol() const;
  size_t hash() const;
};

template <class T>
struct KernelConfigField {
  std::string_view name;  // JSON key, filter field (c.<name>), CSV column
  std::string_view tag;   // name segment prefix; empty = positional, always present
  T KernelConfig::*member;
};

// The single field table. Order is the canonical name order.
inline constexpr auto kKernelConfigFields = std::make_tuple(
    KernelConfigField<Family>{"family", "", &KernelConfig::family},
    KernelConfigField<Arch>{"arch", "", &KernelConfig::arch},
    KernelConfigField<DType>{"dtype", "", &KernelConfig::dtype},
    KernelConfigField<Mode>{"mode", "", &KernelConfig::mode},
    KernelConfigField<Pipeline>{"pipeline", "", &KernelConfig::pipeline},
    KernelConfigField<int32_t>{"hdim_q", "hq", &KernelConfig::hdim_q},
    KernelConfigField<int32_t>{"hdim_v", "hv", &KernelConfig::hdim_v},
    KernelConfigField<int32_t>{"block_m", "m", &KernelConfig::block_m},
    KernelConfigField<int32_t>{"block_n", "n", &KernelConfig::block_n},
    KernelConfigField<int32_t>{"block_k", "k", &KernelConfig::block_k},
    KernelConfigField<int32_t>{"warps", "w", &KernelConfig::warps},
    KernelConfigField<int32_t>{"stages", "s", &KernelConfig::stages},
    KernelConfigField<DType>{"out_dtype", "out-", &KernelConfig::out_dtype},
    KernelConfigField<bool>{"pad_seqlen_q", "padsq-", &KernelConfig::pad_seqlen_q},
    KernelConfigField<bool>{"pad_seqlen_k", "padsk-", &KernelConfig::pad_seqlen_k},
    KernelConfigField<bool>{"pad_hdim_q", "paddq-", &KernelConfig::pad_hdim_q},
    KernelConfigField<bool>{"pad_hdim_v", "paddv-", &KernelConfig::pad_hdim_v},
    KernelConfigField<MaskKind>{"mask", "mask-", &KernelConfig::mask},
    KernelConfigField<BiasKind>{"bias", "bias-", &KernelConfig::bias},
    KernelConfigField<bool>{"lse", "lse-", &KernelConfig::lse},
    KernelConfigField<bool>{"dropout", "dropout-", &KernelConfig::dropout},
    KernelConfigField<bool>{"softcap", "softcap-", &KernelConfig::softcap},
    KernelConfigField<bool>{"sink_logit", "sinklogit-", &KernelConfig::sink_logit},
    KernelConfigField<PageTableKind>{"page_table", "paged-", &KernelConfig::page_table},
    KernelConfigField<int32_t>{"page_size", "page-", &KernelConfig::page_size},
    KernelConfigField<KvLayout>{"kv_layout", "kv-", &KernelConfig::kv_layout},
    KernelConfigField<RopeKind>{"rope", "rope-", &KernelConfig::rope},
    KernelConfigField<Fp8ScaleKind>{"fp8_scale", "fp8scale-", &KernelConfig::fp8_scale},
    KernelConfigField<bool>{"deterministic", "det-", &KernelConfig::deterministic},
    KernelConfigField<bool>{"dbias", "dbias-", &KernelConfig::dbias},
    KernelConfigField<bool>{"persistent", "persist-", &KernelConfig::persistent},
    KernelConfigField<bool>{"pack_gqa", "packgqa-", &KernelConfig::pack_gqa},
    KernelConfigField<bool>{"accumulate", "acc-", &KernelConfig::accumulate},
    KernelConfigField<bool>{"warp_decode", "warpdecode-", &KernelConfig::warp_decode});

// Calls visit(field) for each entry of kKernelConfigFields, in order.
template <class Visitor>
constexpr void for_each_kernel_config_field(Visitor&& visit) {
  std::apply([&](const auto&... field) { (visit(field), ...); }, kKernelConfigFields);
}

// A field's value in the filter language and CSV: numbers, booleans, or enum names.
using FieldValue = std::variant<int64_t, bool, std::string>;

bool has_kernel_config_field(std::string_view name);
// Throws tilefmha::Error naming the field when unknown.
FieldValue get_field(const KernelConfig& config, std::string_view name);
// Sets a field from its text form ("128", "true", "causal"); throws naming field and value.
void set_field(KernelConfig& config, std::string_view name, std::string_view text);
std::string field_to_string(const FieldValue& value);

void to_json(nlohmann::json& out, const KernelConfig& config);
// Unknown keys and bad values are errors naming them; absent keys keep their defaults.
void from_json(const nlohmann::json& in, KernelConfig& config);

}  // namespace tilefmha

template <>
struct std::hash<tilefmha::KernelConfig> {
  size_t operator()(const tilefmha::KernelConfig& config) const { return config.hash(); }
};
