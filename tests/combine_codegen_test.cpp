// Codegen of the split-KV kernels with no GPU: the combine kernel (family fwd_splitkv_combine)
// and the sm80_mma forward in its fwd_splitkv form. Enumerated tiles pass the support checks and
// others are refused naming the field; sources spell their configs; launch shapes cover every
// row or (sequence, split) pair; sources compile with NVRTC for sm_80 and sm_90a.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "codegen/combine.hpp"
#include "codegen/fwd_sm80.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/compiler.hpp"
#include "support/compile_cases.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "support/ptxas_report.hpp"
#include "support/refusal.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::CompileCase;
using testing::expect_compiles;
using testing::nvrtc_available;
using testing::sm80_fwd_config;

// The enumerated combine tile (data/arch/sm90.json): 16 rows, 128 splits per pass, 4 warps,
// every bound checked.
KernelConfig combine_config(DType dtype, int hdim_v, Arch arch = Arch::sm90) {
  KernelConfig c;
  c.family = Family::fwd_splitkv_combine;
  c.pipeline = Pipeline::combine;
  c.arch = arch;
  c.dtype = c.out_dtype = dtype;
  c.hdim_q = c.hdim_v = hdim_v;
  c.block_m = 16;
  c.block_n = 128;
  c.block_k = hdim_v;
  c.warps = 4;
  c.stages = 1;
  c.pad_seqlen_q = c.pad_seqlen_k = c.pad_hdim_q = c.pad_hdim_v = true;
  return c;
}

// The enumerated fwd_splitkv tile of sm80_mma: block_m 64 on 4 warps.
KernelConfig split_config(DType dtype, int hdim, int block_n) {
  KernelConfig c = sm80_fwd_config(dtype, hdim, hdim, 64, block_n, 4, 2);
  c.family = Family::fwd_splitkv;
  c.arch = Arch::sm80;
  return c;
}

std::string combine_refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_combine(c); });
}

std::string sm80_refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_sm80(c); });
}

TEST(CombineCodegen, TileTableShapesAreSupported) {
  for (int hdim : {32, 64, 96, 128, 160, 192, 256}) {
    for (DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
      KernelConfig c = combine_config(dtype, hdim);
      EXPECT_EQ(combine_refusal(c), "") << c.name();
      c.mode = Mode::group;
      c.lse = c.sink_logit = true;
      EXPECT_EQ(combine_refusal(c), "") << c.name();
    }
  }
  // (192, 128): only hdim_v shapes the combine.
  KernelConfig asymmetric = combine_config(DType::bf16, 128);
  asymmetric.hdim_q = asymmetric.block_k = 192;
  EXPECT_EQ(combine_refusal(asymmetric), "");
  // fp8 problems combine into their bf16 or fp32 output.
  KernelConfig fp8 = combine_config(DType::fp8_e4m3, 128);
  fp8.out_dtype = DType::bf16;
  EXPECT_EQ(combine_refusal(fp8), "");
  EXPECT_EQ(codegen::threads_per_block_combine(fp8), 128);
  EXPECT_EQ(codegen::shared_bytes_combine(fp8), 16 * 129 * 4);
}

TEST(CombineCodegen, UnsupportedFieldsAreNamed) {
  const KernelConfig good = combine_config(DType::bf16, 128);
  auto expect_field = [](const KernelConfig& c, const std::string& field) {
    testing::expect_names_field(combine_refusal(c), field);
  };
  KernelConfig c = good;
  c.family = Family::fwd;
  expect_field(c, "family");
  c = good;
  c.pipeline = Pipeline::sm80_mma;
  expect_field(c, "pipeline");
  c = good;
  c.dtype = DType::uint8;
  expect_field(c, "dtype");
  c = good;
  c.out_dtype = DType::fp16;  // bf16 inputs give bf16 O
  expect_field(c, "out_dtype");
  c = combine_config(DType::fp8_e5m2, 128);  // fp8 O does not exist
  expect_field(c, "out_dtype");
  c = good;
  c.hdim_v = 320;
  expect_field(c, "hdim_v");
  c = good;
  c.warps = 9;
  expect_field(c, "warps");
  c = good;
  c.block_m = 24;  // not a power of two
  expect_field(c, "block_m");
  c = good;
  c.block_m = 2;  // 64 lanes a row: more than a warp
  expect_field(c, "block_m");
  c = good;
  c.block_m = 256;  // half a lane a row
  expect_field(c, "block_m");
  c = good;
  c.block_n = 0;
  expect_field(c, "block_n");
  c = good;
  c.block_n = 1024;  // 16 x 1025 fp32 exceed 48 KiB
  expect_field(c, "block_n");
  c = good;
  c.mask = MaskKind::causal;
  expect_field(c, "mask");
  c = good;
  c.bias = BiasKind::alibi;
  expect_field(c, "bias");
  c = good;
  c.dropout = true;
  expect_field(c, "dropout");
  c = good;
  c.softcap = true;
  expect_field(c, "softcap");
  c = good;
  c.page_table = PageTableKind::vllm_block_table;
  expect_field(c, "page_table");
  c = good;
  c.rope = RopeKind::interleaved;
  expect_field(c, "rope");
  c = good;
  c.fp8_scale = Fp8ScaleKind::per_tensor;
  expect_field(c, "fp8_scale");
  c = good;
  c.deterministic = true;
  expect_field(c, "deterministic");
  c = good;
  c.persistent = true;
  expect_field(c, "persistent");
  c = good;
  c.pack_gqa = true;
  expect_field(c, "pack_gqa");
  EXPECT_THROW(codegen::generate_combine_source(c), Error);
}

TEST(CombineCodegen, SourceSpellsTheConfig) {
  KernelConfig c = combine_config(DType::fp16, 96);
  c.lse = true;
  c.sink_logit = true;
  const std::string source = codegen::generate_combine_source(c);
  EXPECT_NE(source.find("#include \"fmha/splitkv_combine.h\""), std::string::npos);
  EXPECT_NE(source.find("__launch_bounds__(128) " + c.symbol() +
                        "(const tilefmha::fmha::CombineParams params)"),
            std::string::npos)
      << source;
  for (const char* piece :
       {"CombineTraits<\n    tilefmha::tile::half_t", "/*hdim_v=*/96", "/*block_m=*/16",
        "/*block_n=*/128", "/*warps=*/4", "/*store_lse=*/true, /*sink_logit=*/true"})
    EXPECT_NE(source.find(piece), std::string::npos) << piece;
  // O takes out_dtype: fp32 problems write float, fp8 ones their 16-bit or fp32 output.
  EXPECT_NE(codegen::generate_combine_source(combine_config(DType::fp32, 64)).find("    float,"),
            std::string::npos);
  KernelConfig fp8 = combine_config(DType::fp8_e4m3, 64);
  fp8.out_dtype = DType::bf16;
  EXPECT_NE(codegen::generate_combine_source(fp8).find("tilefmha::tile::bfloat16_t"),
            std::string::npos);
}

TEST(CombineCodegen, LaunchShapeCoversEveryRow) {
  testing::TensorPool pool(1);
  const KernelConfig c = combine_config(DType::bf16, 128);
  const Problem batch =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {3, 8, 2, 100, 300, 128, 128}).build();
  jit::LaunchShape shape = codegen::launch_shape_combine(c, batch);
  EXPECT_EQ(shape.grid[0], (3u * 8 * 100 + 15) / 16);
  EXPECT_EQ(shape.grid[1], 1u);
  EXPECT_EQ(shape.grid[2], 1u);
  EXPECT_EQ(shape.block[0], 128u);
  EXPECT_EQ(shape.dynamic_shared_bytes, 0u);  // the staged LSEs are static shared memory
  // Hopper combines wait for the split grid in the kernel, so they launch behind it with
  // programmatic dependency; older arches have no griddepcontrol and launch after it.
  EXPECT_TRUE(shape.programmatic_dependency);
  EXPECT_FALSE(codegen::launch_shape_combine(combine_config(DType::bf16, 128, Arch::sm80), batch)
                   .programmatic_dependency);
  // Group mode: the plan is reused for every packing of 3 sequences of at most 41 tokens, so
  // the grid covers 3 x 41 tokens, not this packing's 61.
  const Problem group = testing::group_problem(pool, Family::fwd, DType::bf16, {0, 20, 20, 61},
                                               {0, 30, 90, 200}, 4, 1, 128, 128)
                            .build();
  ASSERT_EQ(group.seqlen_q, 41);
  EXPECT_EQ(codegen::launch_shape_combine(c, group).grid[0], (4u * 3 * 41 + 15) / 16);
  // A kernel narrower than the problem's head dim is refused, naming it.
  const Problem wide =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 1, 1, 8, 8, 256, 256}).build();
  testing::expect_names_field(
      testing::not_supported_message([&] { codegen::launch_shape_combine(c, wide); }), "hdim_v");
}

TEST(SplitKvSm80Codegen, SupportCheckKnowsTheFamily) {
  for (auto [hdim, block_n] : {std::pair{32, 128}, std::pair{64, 128}, std::pair{96, 64},
                               std::pair{128, 64}, std::pair{160, 32}, std::pair{256, 32}}) {
    KernelConfig c = split_config(DType::bf16, hdim, block_n);
    c.mask = MaskKind::window;
    c.bias = BiasKind::alibi;
    c.softcap = true;
    EXPECT_EQ(sm80_refusal(c), "") << c.name();
  }
  const KernelConfig good = split_config(DType::fp16, 128, 64);
  KernelConfig c = good;
  c.lse = true;
  testing::expect_names_field(sm80_refusal(c), "lse");
  c = good;
  c.dropout = true;
  testing::expect_names_field(sm80_refusal(c), "dropout");
  c = good;
  c.sink_logit = true;
  testing::expect_names_field(sm80_refusal(c), "sink_logit");
  c = good;
  c.block_n = 48;  // 128-key chunks would split a block
  testing::expect_names_field(sm80_refusal(c), "block_n");
  c = good;
  c.family = Family::fwd_appendkv;
  testing::expect_names_field(sm80_refusal(c), "family");
}

TEST(SplitKvSm80Codegen, SourceAndLaunchShape) {
  const KernelConfig split = split_config(DType::bf16, 128, 64);
  EXPECT_NE(codegen::generate_sm80_source(split).find("/*split_kv=*/true>;"), std::string::npos);
  KernelConfig fwd = split;
  fwd.family = Family::fwd;
  // The fwd kernel's source (and so its code) is untouched by the split form.
  EXPECT_EQ(codegen::generate_sm80_source(fwd).find("split_kv"), std::string::npos);

  testing::TensorPool pool(2);
  Problem p = testing::batch_problem(pool, Family::fwd, DType::bf16, {3, 4, 2, 100, 1000, 128, 128})
                  .build();
  jit::LaunchShape shape = codegen::launch_shape_sm80(split, p, 5);
  EXPECT_EQ(shape.grid[0], 2u);  // ceil(100 / 64)
  EXPECT_EQ(shape.grid[1], 4u);
  EXPECT_EQ(shape.grid[2], 3u * 5);
  EXPECT_EQ(shape.block[0], 128u);
  EXPECT_EQ(codegen::launch_shape_sm80(fwd, p).grid[2], 3u);
  testing::expect_names_field(
      testing::not_supported_message([&] { codegen::launch_shape_sm80(fwd, p, 2); }), "num_splits");
  testing::expect_names_field(
      testing::not_supported_message([&] { codegen::launch_shape_sm80(split, p, 30000); }),
      "num_splits");
  // A fwd_splitkv problem carries its own split count.
  p.family = Family::fwd_splitkv;
  p.split.num_splits = 7;
  EXPECT_EQ(codegen::launch_shape_sm80(split, p).grid[2], 3u * 7);
}

TEST(CombineCodegen, CompilesForSm80AndSm90a) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<CompileCase> cases;
  for (DType dtype : {DType::fp16, DType::bf16, DType::fp32}) {
    for (int hdim : {64, 128, 256}) {
      // The arch data's rows of one warp (hdim > 64) or half of one, and 16-row tiles (8 lanes a
      // row), whose wide rows keep fewer splits in flight.
      for (int block_m : {hdim > 64 ? 4 : 8, 16}) {
        KernelConfig c = combine_config(dtype, hdim);
        c.block_m = block_m;
        // Both epilogue traits on for one head dim per dtype, off for the others.
        c.lse = c.sink_logit = hdim == 128;
        cases.push_back({c, codegen::generate_combine_source(c)});
      }
    }
  }
  expect_compiles(cases, "sm_80");
  expect_compiles(cases, "sm_90a");
}

TEST(SplitKvSm80Codegen, CompilesForSm80AndSm90a) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<CompileCase> cases;
  KernelConfig causal = split_config(DType::fp16, 64, 128);
  causal.mask = MaskKind::causal;
  causal.pad_seqlen_q = causal.pad_seqlen_k = true;
  cases.push_back({causal, codegen::generate_sm80_source(causal)});
  KernelConfig features = split_config(DType::bf16, 128, 64);
  features.mode = Mode::group;
  features.mask = MaskKind::window;
  features.bias = BiasKind::alibi;
  features.softcap = true;
  features.pad_seqlen_q = features.pad_seqlen_k = true;
  cases.push_back({features, codegen::generate_sm80_source(features)});
  expect_compiles(cases, "sm_80");
  expect_compiles(cases, "sm_90a");
}

}  // namespace
}  // namespace tilefmha
