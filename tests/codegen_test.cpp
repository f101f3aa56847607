// Codegen of the sm80_mma forward kernel: generated sources compile with NVRTC (compile-only, no
// GPU) for sm_80 and sm_90a, unsupported configs are refused naming the field, and launch shapes
// follow the tile.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/generate.hpp"
#include "jit/build_pipeline.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::nvrtc_available;
using testing::sm80_fwd_config;

// A spread of tiles and every hook at least once.
std::vector<KernelConfig> sample_configs() {
  std::vector<KernelConfig> configs;
  configs.push_back(sm80_fwd_config(DType::bf16, 128, 128, 128, 64, 8, 2));

  KernelConfig causal = sm80_fwd_config(DType::fp16, 64, 64, 64, 128, 4, 3);
  causal.mask = MaskKind::causal;
  causal.pad_seqlen_q = causal.pad_seqlen_k = true;
  causal.lse = true;
  configs.push_back(causal);

  KernelConfig group = sm80_fwd_config(DType::bf16, 72, 72, 128, 32, 4, 2);
  group.mode = Mode::group;
  group.pad_seqlen_q = group.pad_seqlen_k = group.pad_hdim_q = group.pad_hdim_v = true;
  group.mask = MaskKind::window;
  group.bias = BiasKind::alibi;
  group.dropout = true;
  group.sink_logit = true;
  group.lse = true;
  configs.push_back(group);

  KernelConfig wide = sm80_fwd_config(DType::fp16, 192, 128, 64, 64, 4, 2);
  wide.bias = BiasKind::elementwise;
  wide.softcap = true;
  wide.pad_seqlen_k = true;
  configs.push_back(wide);
  return configs;
}

TEST(Codegen, SourceSpellsTheConfig) {
  KernelConfig c = sample_configs()[2];
  const std::string source = codegen::generate_source(c);
  EXPECT_NE(source.find("#include \"fmha/fwd_sm80.h\""), std::string::npos);
  EXPECT_NE(source.find("extern \"C\" __global__ void __launch_bounds__(128) " + c.symbol() +
                        "(const tilefmha::fmha::FwdParams params)"),
            std::string::npos)
      << source;
  EXPECT_NE(source.find("tilefmha::fmha::WindowMask"), std::string::npos);
  EXPECT_NE(source.find("tilefmha::fmha::AlibiBias"), std::string::npos);
  EXPECT_NE(source.find("tilefmha::fmha::PhiloxDropout"), std::string::npos);
  EXPECT_NE(source.find("/*group_mode=*/true"), std::string::npos);
  EXPECT_NE(source.find("/*sink_logit=*/true"), std::string::npos);
  EXPECT_NE(source.find("/*hdim_q=*/72"), std::string::npos);

  // Every hook follows its field.
  c.mask = MaskKind::none;
  c.bias = BiasKind::elementwise;
  c.dropout = false;
  c.softcap = true;
  const std::string other = codegen::generate_source(c);
  EXPECT_NE(other.find("tilefmha::fmha::NoMask"), std::string::npos);
  EXPECT_NE(other.find("tilefmha::fmha::Logits<tilefmha::fmha::SoftCap, "
                       "tilefmha::fmha::ElementwiseBias>"),
            std::string::npos);
  EXPECT_NE(other.find("tilefmha::fmha::NoDropout"), std::string::npos);
  EXPECT_EQ(other.find("WindowMask"), std::string::npos);
}

TEST(Codegen, DifferentConfigsGiveDifferentSources) {
  const std::vector<KernelConfig> configs = sample_configs();
  for (size_t a = 0; a < configs.size(); ++a)
    for (size_t b = a + 1; b < configs.size(); ++b)
      EXPECT_NE(codegen::generate_source(configs[a]), codegen::generate_source(configs[b]));
}

void expect_refused(KernelConfig c, const std::string& field) {
  try {
    codegen::generate_source(c);
    ADD_FAILURE() << "accepted " << c.name();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_supported);
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Codegen, RefusesWhatNoTemplateImplements) {
  const KernelConfig good = sample_configs()[0];
  KernelConfig c = good;
  c.pipeline = Pipeline::sm90_ws;
  expect_refused(c, "sm90_ws");  // this sample is an sm80 kernel
  c = good;
  c.family = Family::fwd_appendkv;
  expect_refused(c, "family = fwd_appendkv");
  c = good;
  c.dtype = c.out_dtype = DType::fp32;
  expect_refused(c, "dtype = fp32");
  c = good;
  c.block_m = 96;  // not a multiple of 16 * 8 warps
  expect_refused(c, "block_m = 96");
  c = good;
  c.block_n = 40;
  expect_refused(c, "block_n = 40");
  c = good;
  c.stages = 1;
  expect_refused(c, "stages = 1");
  c = good;
  c.hdim_q = 288;
  expect_refused(c, "hdim_q = 288");
  c = good;
  c.page_table = PageTableKind::vllm_block_table;
  expect_refused(c, "page_table");
  c = good;
  c.mode = Mode::group;  // without sequence padding
  expect_refused(c, "mode = group");
}

TEST(Codegen, LaunchShapeFollowsTheTile) {
  KernelConfig c = sm80_fwd_config(DType::bf16, 128, 128, 128, 64, 8, 2);
  Problem p;
  p.batch = 3;
  p.nhead_q = 5;
  p.seqlen_q = 300;
  const jit::LaunchShape shape = codegen::launch_shape(c, p);
  EXPECT_EQ(shape.grid[0], 3u);  // ceil(300 / 128)
  EXPECT_EQ(shape.grid[1], 5u);
  EXPECT_EQ(shape.grid[2], 3u);
  EXPECT_EQ(shape.block[0], 256u);
  EXPECT_EQ(shape.block[1], 1u);
  // Q 128x128 + 2 stages of K 64x128 and V 64x128, 2 bytes each.
  EXPECT_EQ(shape.dynamic_shared_bytes, (128u * 128 + 2 * 64 * 256) * 2);

  // Head dims pad to 32-column panels: 72 -> 96; 3 stages.
  c = sm80_fwd_config(DType::fp16, 72, 40, 64, 32, 4, 3);
  const jit::LaunchShape padded = codegen::launch_shape(c, p);
  EXPECT_EQ(padded.dynamic_shared_bytes, (64u * 96 + 3 * 32 * (96 + 64)) * 2);
  EXPECT_EQ(padded.grid[0], 5u);  // ceil(300 / 64)
  EXPECT_EQ(padded.block[0], 128u);

  // The O tile may outgrow the main loop's buffers.
  c = sm80_fwd_config(DType::bf16, 32, 256, 128, 16, 4, 2);
  EXPECT_EQ(codegen::launch_shape(c, p).dynamic_shared_bytes, 128u * 256 * 2);

  p.nhead_q = 70000;
  EXPECT_THROW(codegen::launch_shape(c, p), Error);
}

TEST(Codegen, GeneratedSourcesCompileForSm80AndSm90a) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<jit::BuildJob> jobs;
  for (const KernelConfig& c : sample_configs())
    jobs.push_back({c.symbol(), codegen::generate_source(c)});
  for (const char* arch : {"sm_80", "sm_90a"}) {
    jit::BuildOptions options;
    options.compile.arch = arch;
    options.show_progress = false;
    const jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
    EXPECT_TRUE(report.failure_report().empty()) << report.failure_report();
    ASSERT_EQ(report.results.size(), jobs.size());
    for (const jit::BuildResult& result : report.results) {
      EXPECT_TRUE(result.ok) << result.name;
      EXPECT_TRUE(result.note.empty()) << result.name << " warnings:\n" << result.note;
      // The cubin's symbol table names the extern "C" entry.
      const std::string cubin(result.cubin.begin(), result.cubin.end());
      EXPECT_NE(cubin.find(result.name), std::string::npos) << result.name;
      std::printf("%s %s: %.2f s\n", arch, result.name.c_str(), result.compile_seconds);
    }
  }
}

}  // namespace
}  // namespace tilefmha
