// Every rule of enumerate/rules.cpp, each with a config it accepts and one it rejects.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "enumerate/family_traits.hpp"
#include "enumerate/rules.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

// A valid Hopper forward kernel; each case edits a copy of it.
KernelConfig hopper_fwd() {
  KernelConfig c;
  c.family = Family::fwd;
  c.arch = Arch::sm90;
  c.dtype = c.out_dtype = DType::bf16;
  c.pipeline = Pipeline::sm90_ws;
  c.hdim_q = c.hdim_v = 128;
  c.block_m = 128;
  c.block_n = 128;
  c.block_k = 128;
  c.warps = 12;
  c.stages = 2;
  c.pad_seqlen_q = c.pad_seqlen_k = true;  // sm90_ws: TMA pads sequences, never head dims
  return c;
}

using Edit = std::function<void(KernelConfig&)>;

struct RuleCase {
  std::string rule;
  Edit accepted;  // applied to hopper_fwd(): the rule holds
  Edit rejected;  // applied to hopper_fwd(): the rule fails
};

void fp8(KernelConfig& c) {
  c.dtype = DType::fp8_e4m3;
  c.out_dtype = DType::bf16;
  c.fp8_scale = Fp8ScaleKind::per_tensor;
}

void paged_family(KernelConfig& c) {
  c.family = Family::fwd_pagedkv;
  c.page_table = PageTableKind::vllm_block_table;
}

void portable(KernelConfig& c) {
  c.pipeline = Pipeline::sm80_mma;
  c.pad_seqlen_q = c.pad_seqlen_k = c.pad_hdim_q = c.pad_hdim_v = false;
}

const std::vector<RuleCase>& cases() {
  static const std::vector<RuleCase> table = {
      {"pipeline_serves_family", [](KernelConfig& c) { c.family = Family::bwd_dq_dk_dv; },
       [](KernelConfig& c) { c.family = Family::fwd_splitkv_combine; }},
      {"sm90_ws_needs_sm90", [](KernelConfig& c) { c.arch = Arch::sm90; },
       [](KernelConfig& c) { c.arch = Arch::sm89; }},
      {"fp8_needs_sm89", [](KernelConfig& c) { fp8(c), c.arch = Arch::sm89; },
       [](KernelConfig& c) { fp8(c), c.arch = Arch::sm86; }},
      {"attention_dtype_only", [](KernelConfig& c) { c.dtype = c.out_dtype = DType::fp16; },
       [](KernelConfig& c) { c.dtype = c.out_dtype = DType::int32; }},
      {"sm90_ws_dtypes", fp8, [](KernelConfig& c) { c.dtype = c.out_dtype = DType::fp32; }},
      {"simt_f32_only_fp32",
       [](KernelConfig& c) { c.pipeline = Pipeline::simt_f32, c.dtype = DType::fp32; },
       [](KernelConfig& c) { c.pipeline = Pipeline::simt_f32; }},
      {"fp32_attention_only_on_simt_f32",
       [](KernelConfig& c) {
         c.family = Family::bwd_dot_do_o, c.pipeline = Pipeline::bwd_dot_do_o;
         c.dtype = DType::fp32;
       },
       [](KernelConfig& c) { c.pipeline = Pipeline::sm80_mma, c.dtype = DType::fp32; }},
      {"out_dtype_follows_dtype", [](KernelConfig& c) { fp8(c), c.out_dtype = DType::fp32; },
       [](KernelConfig& c) { c.out_dtype = DType::fp16; }},
      {"fp8_no_backward", [](KernelConfig& c) { fp8(c), c.family = Family::fwd_splitkv; },
       [](KernelConfig& c) { fp8(c), c.family = Family::bwd_dq_dk_dv; }},
      {"hdim_pair_supported", [](KernelConfig& c) { c.hdim_q = 192, c.hdim_v = 128; },
       [](KernelConfig& c) { c.hdim_q = 128, c.hdim_v = 64; }},
      {"sm90_ws_whole_panel_hdims", [](KernelConfig& c) { c.hdim_q = 192, c.hdim_v = 128; },
       [](KernelConfig& c) { c.hdim_q = c.hdim_v = 96; }},
      {"batch_prefill_is_group_mode",
       [](KernelConfig& c) { c.family = Family::batch_prefill, c.mode = Mode::group; },
       [](KernelConfig& c) { c.family = Family::batch_prefill, c.mode = Mode::batch; }},
      {"group_mode_pads_seqlen", [](KernelConfig& c) { c.mode = Mode::group; },
       [](KernelConfig& c) { c.mode = Mode::group, c.pad_seqlen_q = c.pad_seqlen_k = false; }},
      {"seqlen_padding_pairs", [](KernelConfig& c) { c.pad_seqlen_q = c.pad_seqlen_k = false; },
       [](KernelConfig& c) { c.pad_seqlen_k = false; }},
      {"hdim_padding_pairs", [](KernelConfig& c) { c.pad_hdim_q = c.pad_hdim_v = true; },
       [](KernelConfig& c) { c.pad_hdim_q = true; }},
      {"sm90_ws_pads_sequences", [](KernelConfig& c) { c.pad_hdim_q = c.pad_hdim_v = true; },
       [](KernelConfig& c) { c.pad_seqlen_q = c.pad_seqlen_k = false; }},
      {"memory_bound_pipelines_pad_everything",
       [](KernelConfig& c) {
         c.family = Family::fwd_splitkv_combine, c.pipeline = Pipeline::combine;
         c.pad_hdim_q = c.pad_hdim_v = true;
       },
       [](KernelConfig& c) {
         c.family = Family::fwd_splitkv_combine, c.pipeline = Pipeline::combine;
       }},
      {"softcap_excludes_elementwise_bias",
       [](KernelConfig& c) { c.softcap = true, c.bias = BiasKind::alibi; },
       [](KernelConfig& c) { c.softcap = true, c.bias = BiasKind::elementwise; }},
      {"fp8_no_dropout", [](KernelConfig& c) { c.dropout = true; },
       [](KernelConfig& c) { fp8(c), c.dropout = true; }},
      {"fp8_scale_iff_fp8", fp8, [](KernelConfig& c) { c.fp8_scale = Fp8ScaleKind::per_tensor; }},
      {"per_page_scale_needs_page_table",
       [](KernelConfig& c) { paged_family(c), fp8(c), c.fp8_scale = Fp8ScaleKind::per_page; },
       [](KernelConfig& c) { fp8(c), c.fp8_scale = Fp8ScaleKind::per_page; }},
      {"appendkv_scale_per_tensor_or_page",
       [](KernelConfig& c) { c.family = Family::fwd_appendkv, fp8(c); },
       [](KernelConfig& c) {
         c.family = Family::fwd_appendkv, fp8(c), c.fp8_scale = Fp8ScaleKind::per_block;
       }},
      {"paged_families_need_page_table", paged_family,
       [](KernelConfig& c) { c.family = Family::batch_prefill; }},
      {"page_size_needs_page_table", [](KernelConfig& c) { paged_family(c), c.page_size = 16; },
       [](KernelConfig& c) { c.page_size = 16; }},
      {"kv_layout_needs_page_table",
       [](KernelConfig& c) { paged_family(c), c.kv_layout = KvLayout::hnd; },
       [](KernelConfig& c) { c.kv_layout = KvLayout::hnd; }},
      {"page_size_fits_table",
       [](KernelConfig& c) { c.page_table = PageTableKind::sglang_page_list, c.page_size = 1; },
       [](KernelConfig& c) { c.page_table = PageTableKind::sglang_page_list, c.page_size = 16; }},
      {"dbias_needs_elementwise_bias",
       [](KernelConfig& c) { c.dbias = true, c.bias = BiasKind::elementwise; },
       [](KernelConfig& c) { c.dbias = true, c.bias = BiasKind::alibi; }},
      {"persistent_is_a_launch_form", [](KernelConfig& c) { c.persistent = false; },
       [](KernelConfig& c) { c.persistent = true; }},
      {"pack_gqa_is_a_launch_form", [](KernelConfig& c) { c.pack_gqa = false; },
       [](KernelConfig& c) { c.pack_gqa = true; }},
      {"accumulate_is_a_launch_form", [](KernelConfig& c) { c.accumulate = false; },
       [](KernelConfig& c) { c.accumulate = true; }},
      {"warp_decode_is_a_launch_form", [](KernelConfig& c) { c.warp_decode = false; },
       [](KernelConfig& c) { c.warp_decode = true; }},
      // Traits a family does not carry stay at their defaults.
      {"family_carries_mode", [](KernelConfig& c) { c.mode = Mode::group; },
       [](KernelConfig& c) { c.family = Family::fwd_appendkv, c.mode = Mode::group; }},
      {"family_carries_mask", [](KernelConfig& c) { c.mask = MaskKind::window; },
       [](KernelConfig& c) { c.family = Family::bwd_dot_do_o, c.mask = MaskKind::causal; }},
      {"family_carries_bias", [](KernelConfig& c) { c.bias = BiasKind::alibi; },
       [](KernelConfig& c) { c.family = Family::fwd_splitkv_combine, c.bias = BiasKind::alibi; }},
      {"family_carries_lse", [](KernelConfig& c) { c.lse = true; },
       [](KernelConfig& c) { c.family = Family::fwd_splitkv, c.lse = true; }},
      {"family_carries_dropout",
       [](KernelConfig& c) { c.family = Family::bwd_dq_dk_dv, c.dropout = true; },
       [](KernelConfig& c) { c.family = Family::fwd_pagedkv, c.dropout = true; }},
      {"family_carries_softcap",
       [](KernelConfig& c) { c.family = Family::bwd_dq_dk_dv, c.softcap = true; },
       [](KernelConfig& c) { c.family = Family::bwd_convert_dq, c.softcap = true; }},
      {"family_carries_sink_logit",
       [](KernelConfig& c) { c.family = Family::fwd_splitkv_combine, c.sink_logit = true; },
       [](KernelConfig& c) { c.family = Family::fwd_splitkv, c.sink_logit = true; }},
      {"family_carries_page_table",
       [](KernelConfig& c) {
         c.family = Family::fwd_splitkv, c.page_table = PageTableKind::vllm_block_table;
       },
       [](KernelConfig& c) { c.page_table = PageTableKind::vllm_block_table; }},
      {"family_carries_page_size",
       [](KernelConfig& c) { c.family = Family::fwd_appendkv, c.page_size = 16; },
       [](KernelConfig& c) { c.page_size = 16; }},
      {"family_carries_kv_layout",
       [](KernelConfig& c) { c.family = Family::batch_prefill, c.kv_layout = KvLayout::hnd; },
       [](KernelConfig& c) { c.family = Family::bwd_dq_dk_dv, c.kv_layout = KvLayout::hnd; }},
      {"family_carries_rope",
       [](KernelConfig& c) { c.family = Family::fwd_appendkv, c.rope = RopeKind::half_rotated; },
       [](KernelConfig& c) { c.rope = RopeKind::interleaved; }},
      {"family_carries_fp8_scale",
       [](KernelConfig& c) {
         c.family = Family::fwd_appendkv, c.fp8_scale = Fp8ScaleKind::per_page;
       },
       [](KernelConfig& c) {
         c.family = Family::fwd_splitkv_combine, c.fp8_scale = Fp8ScaleKind::per_tensor;
       }},
      {"family_carries_deterministic",
       [](KernelConfig& c) { c.family = Family::bwd_convert_dq, c.deterministic = true; },
       [](KernelConfig& c) { c.deterministic = true; }},
      {"family_carries_dbias",
       [](KernelConfig& c) { c.family = Family::bwd_dq_dk_dv, c.dbias = true; },
       [](KernelConfig& c) { c.family = Family::fwd, c.dbias = true; }},
  };
  return table;
}

}  // namespace

TEST(EnumerateRules, BaseConfigSatisfiesEveryRule) {
  const Rule* broken = first_violated_rule(hopper_fwd());
  EXPECT_EQ(broken, nullptr) << broken->name;
}

TEST(EnumerateRules, EachRuleAcceptsAndRejects) {
  for (const RuleCase& test : cases()) {
    const Rule& rule = find_rule(test.rule);
    KernelConfig accepted = hopper_fwd();
    test.accepted(accepted);
    KernelConfig rejected = hopper_fwd();
    test.rejected(rejected);
    EXPECT_TRUE(rule.holds(accepted)) << test.rule << " rejects " << accepted.name();
    EXPECT_FALSE(rule.holds(rejected)) << test.rule << " accepts " << rejected.name();
  }
}

// A rule may only look at the fields it declares: changing any other field never flips it.
TEST(EnumerateRules, RulesReadOnlyDeclaredFields) {
  for (const RuleCase& test : cases()) {
    const Rule& rule = find_rule(test.rule);
    for (const Edit& edit : {test.accepted, test.rejected}) {
      KernelConfig base = hopper_fwd();
      edit(base);
      const bool verdict = rule.holds(base);
      for (size_t field = 0; field < kFieldCount; ++field) {
        if (rule.reads.test(field)) continue;
        const FieldInfo& info = field_infos()[field];
        std::vector<int64_t> values = {0, 1};
        if (info.kind == FieldKind::enumeration)
          for (size_t code = 2; code < info.enum_names.size(); ++code) values.push_back(code);
        if (info.kind == FieldKind::integer) values = {0, 16, 64, 192};
        for (int64_t value : values) {
          KernelConfig other = base;
          set_code(other, field, value);
          EXPECT_EQ(rule.holds(other), verdict)
              << test.rule << " depends on undeclared field " << info.name;
        }
      }
    }
  }
}

TEST(EnumerateRules, EveryRuleHasACaseAndNamesAreUnique) {
  std::set<std::string> tested;
  for (const RuleCase& test : cases()) EXPECT_TRUE(tested.insert(test.rule).second) << test.rule;
  std::set<std::string> names;
  for (const Rule& rule : rules()) {
    EXPECT_TRUE(names.insert(rule.name).second) << "duplicate rule " << rule.name;
    EXPECT_TRUE(tested.contains(rule.name)) << "rule without a test: " << rule.name;
    EXPECT_FALSE(rule.why.empty()) << rule.name;
  }
  EXPECT_EQ(names, tested);
}

TEST(EnumerateRules, UnknownRuleIsAnError) {
  EXPECT_THROW(find_rule("no_such_rule"), Error);
}

TEST(EnumerateRules, FamilyCarriesMatchesThePlan) {
  // Split-KV partials leave LSE and the sink logit to the combine.
  EXPECT_FALSE(family_carries(Family::fwd_splitkv, "lse"));
  EXPECT_TRUE(family_carries(Family::fwd_splitkv_combine, "lse"));
  EXPECT_TRUE(family_carries(Family::fwd_splitkv_combine, "sink_logit"));
  EXPECT_TRUE(family_carries(Family::fwd_appendkv, "rope"));
  EXPECT_FALSE(family_carries(Family::fwd, "rope"));
  EXPECT_TRUE(family_carries(Family::bwd_dq_dk_dv, "dbias"));
  EXPECT_THROW(family_carries(Family::fwd, "hdim_q"), Error);
}

// docs/enumeration.md lists every rule (the family_carries_* rules as one group).
TEST(EnumerateRules, DocumentationNamesEveryRule) {
  std::ifstream file(std::string(TILEFMHA_DATA_DIR) + "/../docs/enumeration.md");
  ASSERT_TRUE(file) << "docs/enumeration.md not found";
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  for (const Rule& rule : rules()) {
    const std::string name =
        rule.name.starts_with("family_carries_") ? "family_carries_<trait>" : rule.name;
    EXPECT_NE(text.find("`" + name + "`"), std::string::npos) << name << " is not documented";
  }
}
