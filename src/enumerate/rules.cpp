#include "enumerate/rules.hpp"

#include <algorithm>
#include <vector>

#include "enumerate/family_traits.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {
namespace {

// ---- pipelines, archs and dtypes -------------------------------------------------------------

bool pipeline_serves_family(const KernelConfig& c) {
  const auto pipelines = pipelines_for_family(c.family);
  return std::find(pipelines.begin(), pipelines.end(), c.pipeline) != pipelines.end();
}

bool sm90_ws_needs_sm90(const KernelConfig& c) {
  return c.pipeline != Pipeline::sm90_ws || c.arch == Arch::sm90;
}

bool fp8_needs_sm89(const KernelConfig& c) {
  return !is_fp8(c.dtype) || c.arch == Arch::sm89 || c.arch == Arch::sm90;
}

bool attention_dtype_only(const KernelConfig& c) {
  return is_attention_dtype(c.dtype) && is_attention_dtype(c.out_dtype);
}

bool sm90_ws_dtypes(const KernelConfig& c) {
  return c.pipeline != Pipeline::sm90_ws || c.dtype == DType::fp16 || c.dtype == DType::bf16 ||
         is_fp8(c.dtype);
}

bool simt_f32_only_fp32(const KernelConfig& c) {
  return c.pipeline != Pipeline::simt_f32 || c.dtype == DType::fp32;
}

bool fp32_attention_only_on_simt_f32(const KernelConfig& c) {
  return !is_attention_family(c.family) || c.dtype != DType::fp32 ||
         c.pipeline == Pipeline::simt_f32;
}

// Append-KV writes no O: the cache keeps its own dtype, so out_dtype is just dtype.
bool out_dtype_follows_dtype(const KernelConfig& c) {
  if (is_fp8(c.dtype) && c.family != Family::fwd_appendkv)
    return c.out_dtype == DType::bf16 || c.out_dtype == DType::fp32;
  return c.out_dtype == c.dtype;
}

bool fp8_no_backward(const KernelConfig& c) {
  return !is_backward_family(c.family) || !is_fp8(c.dtype);
}

// ---- head dims ---------------------------------------------------------------------------------

bool hdim_pair_supported(const KernelConfig& c) {
  constexpr int32_t kHdims[] = {32, 64, 96, 128, 160, 192, 256};
  const bool known = std::find(std::begin(kHdims), std::end(kHdims), c.hdim_q) != std::end(kHdims);
  return known && (c.hdim_v == c.hdim_q || (c.hdim_q == 192 && c.hdim_v == 128));
}

bool sm90_ws_whole_panel_hdims(const KernelConfig& c) {
  return c.pipeline != Pipeline::sm90_ws ||
         (is_sm90_ws_head_dim(c.hdim_q) && is_sm90_ws_head_dim(c.hdim_v));
}

// ---- modes and padding ---------------------------------------------------------------------

bool batch_prefill_is_group_mode(const KernelConfig& c) {
  return c.family != Family::batch_prefill || c.mode == Mode::group;
}

bool group_mode_pads_seqlen(const KernelConfig& c) {
  return c.mode != Mode::group || (c.pad_seqlen_q && c.pad_seqlen_k);
}

bool seqlen_padding_pairs(const KernelConfig& c) {
  return c.pad_seqlen_q == c.pad_seqlen_k;
}

bool hdim_padding_pairs(const KernelConfig& c) {
  return c.pad_hdim_q == c.pad_hdim_v;
}

// TMA bounds-checks sequence tiles for free, so sm90_ws always pads sequences; its head-dim
// padding is TMA's zero fill past the head dim (and clipping on store), so both kinds exist.
bool sm90_ws_pads_sequences(const KernelConfig& c) {
  return c.pipeline != Pipeline::sm90_ws || (c.pad_seqlen_q && c.pad_seqlen_k);
}

bool memory_bound_pipelines_pad_everything(const KernelConfig& c) {
  return !is_memory_bound_pipeline(c.pipeline) ||
         (c.pad_seqlen_q && c.pad_seqlen_k && c.pad_hdim_q && c.pad_hdim_v);
}

// ---- features ------------------------------------------------------------------------------

bool softcap_excludes_elementwise_bias(const KernelConfig& c) {
  return !c.softcap || c.bias != BiasKind::elementwise;
}

bool fp8_no_dropout(const KernelConfig& c) {
  return !is_fp8(c.dtype) || !c.dropout;
}

// Families that read no fp8 data keep fp8_scale none (family_carries_fp8_scale).
bool fp8_scale_iff_fp8(const KernelConfig& c) {
  static const size_t fp8_scale_field = field_index("fp8_scale");
  return !carried_trait_fields(c.family).test(fp8_scale_field) ||
         is_fp8(c.dtype) == (c.fp8_scale != Fp8ScaleKind::none);
}

bool per_page_scale_needs_page_table(const KernelConfig& c) {
  return c.fp8_scale != Fp8ScaleKind::per_page || c.page_table != PageTableKind::none;
}

bool appendkv_scale_per_tensor_or_page(const KernelConfig& c) {
  return c.family != Family::fwd_appendkv || c.fp8_scale != Fp8ScaleKind::per_block;
}

bool paged_families_need_page_table(const KernelConfig& c) {
  const bool always_paged = c.family == Family::fwd_pagedkv || c.family == Family::batch_prefill;
  return !always_paged || c.page_table != PageTableKind::none;
}

bool page_size_needs_page_table(const KernelConfig& c) {
  return c.page_size == 0 || c.page_table != PageTableKind::none;
}

bool kv_layout_needs_page_table(const KernelConfig& c) {
  return c.kv_layout == KvLayout::nhd || c.page_table != PageTableKind::none;
}

bool page_size_fits_table(const KernelConfig& c) {
  switch (c.page_table) {
    case PageTableKind::none: return true;
    case PageTableKind::vllm_block_table: return c.page_size == 0 || c.page_size == 16;
    case PageTableKind::sglang_page_list: return c.page_size == 0 || c.page_size == 1;
  }
  return false;
}

bool dbias_needs_elementwise_bias(const KernelConfig& c) {
  return !c.dbias || c.bias == BiasKind::elementwise;
}

bool persistent_is_a_launch_form(const KernelConfig& c) {
  return !c.persistent;
}

bool pack_gqa_is_a_launch_form(const KernelConfig& c) {
  return !c.pack_gqa;
}

bool accumulate_is_a_launch_form(const KernelConfig& c) {
  return !c.accumulate;
}

bool warp_decode_is_a_launch_form(const KernelConfig& c) {
  return !c.warp_decode;
}

// A trait the family does not carry stays at its default value.
Rule family_carries_rule(std::string_view field) {
  const size_t index = field_index(field);
  const int64_t default_code = get_code(KernelConfig{}, index);
  return Rule{"family_carries_" + std::string(field),
              "a family's kernels vary " + std::string(field) +
                  " only if the family carries it (see family_traits.cpp); otherwise it keeps "
                  "its default " +
                  code_to_string(index, default_code),
              field_set({"family", field}), [index, default_code](const KernelConfig& c) {
                return carried_trait_fields(c.family).test(index) ||
                       get_code(c, index) == default_code;
              }};
}

std::vector<Rule> build_rules() {
  std::vector<Rule> out = {
      {"pipeline_serves_family",
       "attention families use sm80_mma/sm90_ws/simt_f32; the others their own pipeline",
       field_set({"family", "pipeline"}), pipeline_serves_family},
      {"sm90_ws_needs_sm90", "wgmma, TMA and setmaxnreg exist only on sm_90a",
       field_set({"arch", "pipeline"}), sm90_ws_needs_sm90},
      {"fp8_needs_sm89", "fp8 tensor-core instructions start with sm89",
       field_set({"arch", "dtype"}), fp8_needs_sm89},
      {"attention_dtype_only", "kernels take fp16, bf16, fp32 or fp8 data, never index types",
       field_set({"dtype", "out_dtype"}), attention_dtype_only},
      {"sm90_ws_dtypes", "the warp-specialized Hopper pipeline is fp16, bf16 or fp8 only",
       field_set({"pipeline", "dtype"}), sm90_ws_dtypes},
      {"simt_f32_only_fp32", "the CUDA-core pipeline exists for accurate fp32 only",
       field_set({"pipeline", "dtype"}), simt_f32_only_fp32},
      {"fp32_attention_only_on_simt_f32",
       "fp32 attention runs on CUDA cores (tensor cores would lose precision to tf32)",
       field_set({"family", "pipeline", "dtype"}), fp32_attention_only_on_simt_f32},
      {"out_dtype_follows_dtype",
       "O has the input dtype, except fp8 inputs which give bf16 or fp32 (append-KV writes no O)",
       field_set({"family", "dtype", "out_dtype"}), out_dtype_follows_dtype},
      {"fp8_no_backward", "fp8 is an inference format: no backward kernels",
       field_set({"family", "dtype"}), fp8_no_backward},
      {"hdim_pair_supported",
       "head dims are 32, 64, 96, 128, 160, 192 or 256, equal for Q and V except (192, 128)",
       field_set({"hdim_q", "hdim_v"}), hdim_pair_supported},
      {"sm90_ws_whole_panel_hdims",
       "sm90_ws tiles are whole 64-element swizzled panels: head dims 64, 128, 192, 256",
       field_set({"pipeline", "hdim_q", "hdim_v"}), sm90_ws_whole_panel_hdims},
      {"batch_prefill_is_group_mode", "batch prefill serves varlen queries (group mode)",
       field_set({"family", "mode"}), batch_prefill_is_group_mode},
      {"group_mode_pads_seqlen", "varlen sequences are never tile multiples",
       field_set({"mode", "pad_seqlen_q", "pad_seqlen_k"}), group_mode_pads_seqlen},
      {"seqlen_padding_pairs", "a kernel either assumes tile-multiple lengths or checks both",
       field_set({"pad_seqlen_q", "pad_seqlen_k"}), seqlen_padding_pairs},
      {"hdim_padding_pairs", "head-dim padding covers both head dims or neither",
       field_set({"pad_hdim_q", "pad_hdim_v"}), hdim_padding_pairs},
      {"sm90_ws_pads_sequences",
       "TMA checks sequence bounds for free, so sm90_ws kernels always pad sequences",
       field_set({"pipeline", "pad_seqlen_q", "pad_seqlen_k"}), sm90_ws_pads_sequences},
      {"memory_bound_pipelines_pad_everything",
       "the row-parallel memory-bound kernels check every bound: no unpadded variants",
       field_set({"pipeline", "pad_seqlen_q", "pad_seqlen_k", "pad_hdim_q", "pad_hdim_v"}),
       memory_bound_pipelines_pad_everything},
      {"softcap_excludes_elementwise_bias",
       "soft cap and an elementwise bias do not compose (the cap would have to see the bias)",
       field_set({"bias", "softcap"}), softcap_excludes_elementwise_bias},
      {"fp8_no_dropout", "fp8 kernels are inference kernels: no dropout",
       field_set({"dtype", "dropout"}), fp8_no_dropout},
      {"fp8_scale_iff_fp8", "fp8 inputs always come with a scale kind, other dtypes never",
       field_set({"family", "dtype", "fp8_scale"}), fp8_scale_iff_fp8},
      {"per_page_scale_needs_page_table", "per-page KV scales exist only for paged caches",
       field_set({"fp8_scale", "page_table"}), per_page_scale_needs_page_table},
      {"appendkv_scale_per_tensor_or_page",
       "appending into a per-block scaled cache would rescale partly filled blocks",
       field_set({"family", "fp8_scale"}), appendkv_scale_per_tensor_or_page},
      {"paged_families_need_page_table", "fwd_pagedkv and batch_prefill read K/V through pages",
       field_set({"family", "page_table"}), paged_families_need_page_table},
      {"page_size_needs_page_table", "a page size specialization needs pages",
       field_set({"page_table", "page_size"}), page_size_needs_page_table},
      {"kv_layout_needs_page_table", "the HND layout is a layout of paged caches",
       field_set({"page_table", "kv_layout"}), kv_layout_needs_page_table},
      {"page_size_fits_table",
       "specializations: 16-token pages for vLLM block tables, 1-token pages for SGLang lists "
       "(page_size 0 serves any size)",
       field_set({"page_table", "page_size"}), page_size_fits_table},
      {"dbias_needs_elementwise_bias", "dBias is the gradient of an elementwise bias",
       field_set({"bias", "dbias"}), dbias_needs_elementwise_bias},
      {"persistent_is_a_launch_form",
       "the dispatcher derives a kernel's persistent form at launch where it pays; it is "
       "never a separate enumerated kernel",
       field_set({"persistent"}), persistent_is_a_launch_form},
      {"pack_gqa_is_a_launch_form",
       "the dispatcher derives a kernel's GQA-packed form at launch for short query rows; it is "
       "never a separate enumerated kernel",
       field_set({"pack_gqa"}), pack_gqa_is_a_launch_form},
      {"accumulate_is_a_launch_form",
       "the dispatcher derives a kernel's accumulating epilogue from the problem; it is never a "
       "separate enumerated kernel",
       field_set({"accumulate"}), accumulate_is_a_launch_form},
      {"warp_decode_is_a_launch_form",
       "the dispatcher derives a split kernel's warp-MMA decode form where it pays; it is never a "
       "separate enumerated kernel",
       field_set({"warp_decode"}), warp_decode_is_a_launch_form},
  };
  for (std::string_view field : trait_fields()) out.push_back(family_carries_rule(field));
  return out;
}

}  // namespace

std::span<const Rule> rules() {
  static const std::vector<Rule> all = build_rules();
  return all;
}

const Rule& find_rule(std::string_view name) {
  for (const Rule& rule : rules())
    if (rule.name == name) return rule;
  throw Error(ErrorKind::invalid_argument, "unknown rule '" + std::string(name) + "'");
}

const Rule* first_violated_rule(const KernelConfig& config) {
  for (const Rule& rule : rules())
    if (!rule.holds(config)) return &rule;
  return nullptr;
}

}  // namespace tilefmha::enumerate
