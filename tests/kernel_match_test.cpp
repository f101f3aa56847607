#include "runtime/kernel_match.hpp"

#include <gtest/gtest.h>

using namespace tilefmha;
using runtime::rejection_reason;

namespace {

// Matching reads only shapes and traits, so problems here carry no tensors.
Problem causal_problem() {
  Problem p;
  p.family = Family::fwd;
  p.dtype = p.out_dtype = DType::bf16;
  p.batch = 2;
  p.nhead_q = p.nhead_k = 4;
  p.seqlen_q = p.seqlen_k = 1024;
  p.hdim_q = p.hdim_v = 128;
  p.mask.kind = MaskKind::causal;
  p.mask.window_right = 0;
  return p;
}

KernelConfig causal_kernel() {
  KernelConfig c;
  c.family = Family::fwd;
  c.mask = MaskKind::causal;
  return c;
}

std::string reason(const KernelConfig& c, const Problem& p, Arch arch = Arch::sm90) {
  return rejection_reason(c, p, runtime::stage_families(p).front(), arch).value_or("");
}

}  // namespace

TEST(KernelMatch, ExactTraitsMatch) {
  EXPECT_EQ(reason(causal_kernel(), causal_problem()), "");
}

TEST(KernelMatch, EachTraitMismatchIsNamed) {
  const Problem p = causal_problem();
  auto expect = [&](KernelConfig c, const std::string& field) {
    EXPECT_EQ(reason(c, p).rfind(field, 0), 0u) << reason(c, p);
  };
  KernelConfig c = causal_kernel();
  c.dtype = c.out_dtype = DType::fp16;
  expect(c, "dtype");
  c = causal_kernel();
  c.mask = MaskKind::none;
  expect(c, "mask");
  c = causal_kernel();
  c.lse = true;
  expect(c, "lse");
  c = causal_kernel();
  c.hdim_q = c.hdim_v = 64;
  expect(c, "hdim_q");
  c = causal_kernel();
  c.hdim_q = c.hdim_v = 256;
  expect(c, "pad_hdim_q");
  c = causal_kernel();
  c.dropout = true;
  expect(c, "dropout");
  c = causal_kernel();
  c.family = Family::fwd_pagedkv;
  expect(c, "family");
}

TEST(KernelMatch, WindowKernelServesCausalButNotTheReverse) {
  KernelConfig window = causal_kernel();
  window.mask = MaskKind::window;
  EXPECT_EQ(reason(window, causal_problem()), "");
  Problem windowed = causal_problem();
  windowed.mask.kind = MaskKind::window;
  windowed.mask.window_left = 128;
  EXPECT_EQ(reason(causal_kernel(), windowed).rfind("mask", 0), 0u);
}

TEST(KernelMatch, RaggedLengthsNeedPadding) {
  Problem p = causal_problem();
  p.seqlen_q = 1000;
  EXPECT_EQ(reason(causal_kernel(), p).rfind("pad_seqlen_q", 0), 0u);
  KernelConfig padded = causal_kernel();
  padded.pad_seqlen_q = true;
  EXPECT_EQ(reason(padded, p), "");
  p.mode = Mode::group;
  padded.mode = Mode::group;
  EXPECT_EQ(reason(padded, p).rfind("pad_seqlen_k", 0), 0u);
}

TEST(KernelMatch, HopperPipelineNeedsSm90) {
  KernelConfig c = causal_kernel();
  c.pipeline = Pipeline::sm90_ws;
  EXPECT_EQ(reason(c, causal_problem(), Arch::sm90), "");
  EXPECT_EQ(reason(c, causal_problem(), Arch::sm90).size(), 0u);
  c.arch = Arch::sm80;
  EXPECT_EQ(reason(c, causal_problem(), Arch::sm80).rfind("pipeline", 0), 0u);
  KernelConfig newer = causal_kernel();
  newer.arch = Arch::sm90;
  EXPECT_EQ(reason(newer, causal_problem(), Arch::sm80).rfind("arch", 0), 0u);
  // sm80 cubins run on sm86/sm89 but not on Hopper.
  KernelConfig ampere = causal_kernel();
  ampere.arch = Arch::sm80;
  EXPECT_EQ(reason(ampere, causal_problem(), Arch::sm86), "");
  EXPECT_EQ(reason(ampere, causal_problem(), Arch::sm90).rfind("arch", 0), 0u);
}

TEST(KernelMatch, StagesPerFamily) {
  Problem p = causal_problem();
  p.family = Family::fwd_splitkv;
  EXPECT_EQ(runtime::stage_families(p),
            (std::vector<Family>{Family::fwd_splitkv, Family::fwd_splitkv_combine}));
  p.family = Family::bwd_dq_dk_dv;
  EXPECT_EQ(runtime::stage_families(p).size(), 3u);
}

TEST(KernelMatch, DepthOrdersNearMissesFirst) {
  EXPECT_LT(runtime::match_depth("dtype: kernel fp32, problem bf16"),
            runtime::match_depth("mask: kernel none, problem causal"));
  EXPECT_LT(runtime::match_depth("mask: x"), runtime::match_depth("codegen: stages = 1"));
  EXPECT_EQ(runtime::match_depth("nonsense"), -1);
}

TEST(KernelMatch, OnlyTraitsTheStageCarriesAreCompared) {
  Problem p = causal_problem();
  p.family = Family::fwd_splitkv;
  p.paged.table = PageTableKind::vllm_block_table;
  p.paged.page_size = 16;
  KernelConfig combine;
  combine.family = Family::fwd_splitkv_combine;
  combine.pipeline = Pipeline::combine;
  // The combine carries no page table or mask: a paged causal split-KV problem still fits it.
  EXPECT_EQ(
      runtime::rejection_reason(combine, p, Family::fwd_splitkv_combine, Arch::sm90).value_or(""),
      "");
}
