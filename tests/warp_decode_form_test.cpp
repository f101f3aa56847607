// The warp-MMA decode form of a Hopper split kernel (KernelConfig::warp_decode): where the
// dispatcher takes it (runtime::warp_decode_pays: hdim 64, packed GQA tiles whose queries fit
// 16 rows, splits merged in clusters of at most four, contiguous K/V), what codegen accepts, and
// what the generated source and the ahead-of-time builds carry. Host only; the kernel itself is
// checked against the CPU reference and cuDNN on the GPU (splitkv_sm90_gpu_test,
// bench/decode_calls.py).
#include <gtest/gtest.h>

#include <string>

#include "codegen/fwd_sm90.hpp"
#include "codegen/generate.hpp"
#include "jit/compiler.hpp"
#include "runtime/heuristics.hpp"
#include "runtime/precompile.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "support/ptxas_report.hpp"
#include "support/refusal.hpp"

namespace tilefmha::runtime {
namespace {

Problem decode(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_k, int64_t hdim,
               int64_t seqlen_q = 1) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, hdim);
  return builder.peek();
}

// The split kernel in its launch form for `problem`: the 64 x 128 tile decode takes.
KernelConfig split_kernel(const Problem& problem) {
  KernelConfig kernel =
      testing::sm90_fwd_config(DType::bf16, int(problem.hdim_q), int(problem.hdim_v), 64, 128);
  kernel.family = Family::fwd_splitkv;
  return launch_form(kernel, problem);
}

TEST(WarpDecodeForm, ShortHdim64DecodeInSmallClustersTakesIt) {
  const Problem problem = decode(8, 32, 8, 1024, 64);
  const KernelConfig kernel = split_kernel(problem);
  ASSERT_TRUE(kernel.pack_gqa);
  EXPECT_FALSE(kernel.warp_decode) << "launch_form leaves the choice to the split plan";
  EXPECT_TRUE(warp_decode_pays(kernel, problem, 2));
  EXPECT_TRUE(warp_decode_pays(kernel, problem, 4));
  // Unpacked MHA decode (1 query row of 64) was not measured on warp MMAs: it keeps wgmma.
  const Problem mha = decode(1, 32, 32, 1024, 64);
  ASSERT_FALSE(split_kernel(mha).pack_gqa);
  EXPECT_FALSE(warp_decode_pays(split_kernel(mha), mha, 4));
}

TEST(WarpDecodeForm, LargeClustersTheCombineAndHdim128KeepWgmma) {
  const Problem problem = decode(8, 32, 8, 1024, 64);
  const KernelConfig kernel = split_kernel(problem);
  EXPECT_FALSE(warp_decode_pays(kernel, problem, 8)) << "clusters of 16 measured slower";
  EXPECT_FALSE(warp_decode_pays(kernel, problem, 1));
  // Splits of more than kClusterMergeMaxChunkKeys keys go through the combine.
  const Problem long_keys = decode(8, 32, 8, 8192, 64);
  EXPECT_FALSE(merges_splits_in_cluster(long_keys, split_kernel(long_keys), 4));
  EXPECT_FALSE(warp_decode_pays(split_kernel(long_keys), long_keys, 4));
  const Problem hdim128 = decode(8, 32, 8, 1024, 128);
  EXPECT_FALSE(warp_decode_pays(split_kernel(hdim128), hdim128, 2));
}

TEST(WarpDecodeForm, TilesOfMoreThanSixteenQueryRowsKeepWgmma) {
  // A packed group of 4 heads: 4 query rows fill 16 tile rows, 16 fill 64.
  const Problem four = decode(8, 32, 8, 1024, 64, 4);
  EXPECT_TRUE(warp_decode_pays(split_kernel(four), four, 2));
  const Problem five = decode(8, 32, 8, 1024, 64, 5);
  EXPECT_FALSE(warp_decode_pays(split_kernel(five), five, 2));
  const Problem two_heads = decode(8, 16, 8, 1024, 64, 8);  // groups of 2: 8 rows fill 16
  EXPECT_TRUE(warp_decode_pays(split_kernel(two_heads), two_heads, 2));
}

TEST(WarpDecodeForm, MasksHooksAndPagesKeepWgmma) {
  const Problem problem = decode(8, 32, 8, 1024, 64);
  KernelConfig causal = split_kernel(problem);
  causal.mask = MaskKind::causal;
  EXPECT_FALSE(warp_decode_pays(causal, problem, 2));
  KernelConfig softcap = split_kernel(problem);
  softcap.softcap = true;
  EXPECT_FALSE(warp_decode_pays(softcap, problem, 2));
  KernelConfig paged = split_kernel(problem);
  paged.page_table = PageTableKind::vllm_block_table;
  paged.pad_seqlen_q = paged.pad_seqlen_k = true;
  EXPECT_FALSE(warp_decode_may_pay(paged));
  KernelConfig sm80 = split_kernel(problem);
  sm80.pipeline = Pipeline::sm80_mma;
  EXPECT_FALSE(warp_decode_may_pay(sm80));
}

TEST(WarpDecodeForm, CodegenDefinesItForPlainSplitKernelsOnly) {
  KernelConfig kernel = testing::sm90_fwd_config(DType::bf16, 64, 64, 64, 128);
  kernel.family = Family::fwd_splitkv;
  kernel.pack_gqa = true;
  EXPECT_EQ(codegen::generate_source(kernel).find("TILEFMHA_WARP_DECODE"), std::string::npos);
  kernel.warp_decode = true;
  EXPECT_NE(codegen::generate_source(kernel).find("#define TILEFMHA_WARP_DECODE 1"),
            std::string::npos);
  EXPECT_NE(kernel.name().find("warpdecode-1"), std::string::npos) << kernel.name();
  EXPECT_EQ(KernelConfig::parse_name(kernel.name()), kernel);

  KernelConfig one_pass = kernel;
  one_pass.family = Family::fwd;
  testing::expect_names_field(
      testing::not_supported_message([&] { codegen::check_supported(one_pass); }), "family");
  KernelConfig causal = kernel;
  causal.mask = MaskKind::causal;
  testing::expect_names_field(
      testing::not_supported_message([&] { codegen::check_supported(causal); }), "mask");
  KernelConfig portable = testing::sm80_fwd_config(DType::bf16, 64, 64, 64, 64, 4, 2);
  portable.family = Family::fwd_splitkv;
  portable.warp_decode = true;
  testing::expect_names_field(
      testing::not_supported_message([&] { codegen::check_supported(portable); }), "warp_decode");
}

// The form compiles to warp MMAs with ldmatrix loads beside the wgmma consumer it falls back to
// (tiles of more than 16 query rows), without spills, packed or not, cluster entry included.
TEST(WarpDecodeForm, CompilesForSm90aToWarpMmasWithoutSpills) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  for (const bool packed : {true, false}) {
    KernelConfig kernel = testing::sm90_fwd_config(DType::bf16, 64, 64, 64, 128);
    kernel.family = Family::fwd_splitkv;
    kernel.pack_gqa = packed;
    kernel.warp_decode = true;
    SCOPED_TRACE(kernel.name());
    const jit::CompiledKernel compiled =
        jit::compile_kernel(kernel.symbol(), codegen::generate_source(kernel),
                            testing::verbose_ptxas_options("sm_90a"));
    EXPECT_FALSE(compiled.cubin.empty());
    for (const std::string instruction : {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                                          "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                                          "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                                          "wgmma.mma_async.sync.aligned.m64n128k16"})
      EXPECT_NE(compiled.ptx.find(instruction), std::string::npos) << instruction;
    EXPECT_EQ(testing::ptxas_report(compiled.log).spill_bytes, 0) << compiled.log;
  }
}

TEST(WarpDecodeForm, Hdim64SplitKernelsPrecompileTheirPackedWarpForm) {
  KernelConfig split = testing::sm90_fwd_config(DType::bf16, 64, 64, 64, 128);
  split.family = Family::fwd_splitkv;
  const std::vector<KernelConfig> forms = with_launch_forms(std::vector{split});
  ASSERT_EQ(forms.size(), 3u);  // plain, packed, packed on warp MMAs
  EXPECT_FALSE(forms[0].warp_decode || forms[1].warp_decode);
  EXPECT_TRUE(forms[2].pack_gqa && forms[2].warp_decode);
}

}  // namespace
}  // namespace tilefmha::runtime
