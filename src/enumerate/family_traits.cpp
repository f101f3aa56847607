#include "enumerate/family_traits.hpp"

#include <algorithm>
#include <array>
#include <initializer_list>

#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {
namespace {

constexpr std::array<Pipeline, 3> kAttentionPipelines = {Pipeline::sm80_mma, Pipeline::sm90_ws,
                                                         Pipeline::simt_f32};
constexpr std::array<Pipeline, 1> kCombine = {Pipeline::combine};
constexpr std::array<Pipeline, 1> kAppendKv = {Pipeline::appendkv};
constexpr std::array<Pipeline, 1> kDotDoO = {Pipeline::bwd_dot_do_o};
constexpr std::array<Pipeline, 1> kConvertDq = {Pipeline::bwd_convert_dq};

constexpr std::array<std::string_view, 14> kTraitFields = {
    "mode",       "mask",      "bias",      "lse",  "dropout",   "softcap",       "sink_logit",
    "page_table", "page_size", "kv_layout", "rope", "fp8_scale", "deterministic", "dbias"};

struct CarriedTraits {
  Family family;
  std::initializer_list<std::string_view> fields;
};

// Split-KV partials carry no LSE output or sink logit: the combine writes the final LSE and adds
// the sink logit once. Append-KV takes one new-token count for the whole batch (batch mode).
std::array<FieldSet, enum_count<Family>()> build_carried_sets() {
  const std::array<CarriedTraits, enum_count<Family>()> table = {{
      {Family::fwd,
       {"mode", "mask", "bias", "lse", "dropout", "softcap", "sink_logit", "fp8_scale"}},
      {Family::fwd_splitkv,
       {"mode", "mask", "bias", "softcap", "page_table", "page_size", "kv_layout", "fp8_scale"}},
      {Family::fwd_splitkv_combine, {"mode", "lse", "sink_logit"}},
      {Family::fwd_pagedkv,
       {"mode", "mask", "bias", "lse", "softcap", "sink_logit", "page_table", "page_size",
        "kv_layout", "fp8_scale"}},
      {Family::fwd_appendkv, {"page_table", "page_size", "kv_layout", "rope", "fp8_scale"}},
      {Family::batch_prefill,
       {"mode", "mask", "bias", "lse", "softcap", "sink_logit", "page_table", "page_size",
        "kv_layout", "fp8_scale"}},
      {Family::bwd_dot_do_o, {"mode"}},
      {Family::bwd_dq_dk_dv,
       {"mode", "mask", "bias", "dropout", "softcap", "deterministic", "dbias"}},
      {Family::bwd_convert_dq, {"mode", "deterministic"}},
  }};
  std::array<FieldSet, enum_count<Family>()> sets;
  for (const CarriedTraits& entry : table)
    for (std::string_view field : entry.fields)
      sets[static_cast<size_t>(entry.family)].set(field_index(field));
  return sets;
}

}  // namespace

bool is_attention_family(Family family) {
  return family == Family::fwd || family == Family::fwd_splitkv || family == Family::fwd_pagedkv ||
         family == Family::batch_prefill || family == Family::bwd_dq_dk_dv;
}

bool is_backward_family(Family family) {
  return family == Family::bwd_dot_do_o || family == Family::bwd_dq_dk_dv ||
         family == Family::bwd_convert_dq;
}

bool is_forward_like_family(Family family) {
  return is_attention_family(family) && !is_backward_family(family);
}

std::span<const Pipeline> pipelines_for_family(Family family) {
  switch (family) {
    case Family::fwd_splitkv_combine: return kCombine;
    case Family::fwd_appendkv: return kAppendKv;
    case Family::bwd_dot_do_o: return kDotDoO;
    case Family::bwd_convert_dq: return kConvertDq;
    default: return kAttentionPipelines;
  }
}

bool is_tensor_core_pipeline(Pipeline pipeline) {
  return pipeline == Pipeline::sm80_mma || pipeline == Pipeline::sm90_ws;
}

bool is_memory_bound_pipeline(Pipeline pipeline) {
  return pipeline == Pipeline::combine || pipeline == Pipeline::appendkv ||
         pipeline == Pipeline::bwd_dot_do_o || pipeline == Pipeline::bwd_convert_dq;
}

bool is_sm90_ws_head_dim(int32_t hdim) {
  return hdim >= 64 && hdim <= 256 && hdim % 64 == 0;
}

bool pipeline_uses_block_n(Pipeline pipeline) {
  return pipeline != Pipeline::bwd_dot_do_o && pipeline != Pipeline::bwd_convert_dq;
}

std::span<const std::string_view> trait_fields() {
  return kTraitFields;
}

const FieldSet& carried_trait_fields(Family family) {
  static const std::array<FieldSet, enum_count<Family>()> sets = build_carried_sets();
  return sets[static_cast<size_t>(family)];
}

bool family_carries(Family family, std::string_view trait_field) {
  if (std::find(kTraitFields.begin(), kTraitFields.end(), trait_field) == kTraitFields.end())
    throw Error(ErrorKind::invalid_argument,
                "'" + std::string(trait_field) + "' is not a feature-trait field");
  return carried_trait_fields(family).test(field_index(trait_field));
}

}  // namespace tilefmha::enumerate
