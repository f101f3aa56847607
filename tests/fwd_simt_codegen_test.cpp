// Codegen of the simt_f32 forward kernel with no GPU: every enumerated simt_f32 fwd config passes
// the support check and others are refused naming the field; generated sources compile with
// NVRTC for sm_80 and sm_90a with no spills; launch shapes follow the tile; FwdParams of fp32
// problems are accepted for simt_f32 whatever their strides.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/fwd_simt.hpp"
#include "codegen/generate.hpp"
#include "jit/compiler.hpp"
#include "runtime/candidates.hpp"
#include "runtime/dispatcher.hpp"
#include "runtime/fwd_params.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "support/ptxas_report.hpp"
#include "support/refusal.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::Dims;
using testing::enable_every_hook;
using testing::expect_names_field;
using testing::ptxas_report;
using testing::PtxasReport;
using testing::QkvLayout;
using testing::simt_fwd_config;
using testing::TensorPool;
using testing::verbose_ptxas_options;

std::string refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported(c); });
}

// The full profile's fwd candidates (what the dispatcher may JIT) include simt_f32 kernels on
// every arch, and codegen accepts each of them.
TEST(FwdSimtCodegen, EveryEnumeratedFwdConfigIsSupported) {
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89, Arch::sm90}) {
    int64_t simt = 0;
    for (const KernelConfig& c : runtime::default_candidates(arch, {Family::fwd})) {
      if (c.pipeline != Pipeline::simt_f32) continue;
      ++simt;
      EXPECT_EQ(refusal(c), "") << c.name();
    }
    EXPECT_GT(simt, 0) << to_string(arch);
  }
}

TEST(FwdSimtCodegen, UnsupportedFieldsAreNamed) {
  auto expect_field = [](const KernelConfig& c, const std::string& field) {
    expect_names_field(refusal(c), field);
  };
  const KernelConfig good = simt_fwd_config(128, 128, 64);
  ASSERT_EQ(refusal(good), "");
  KernelConfig c = good;
  c.family = Family::fwd_splitkv;
  expect_field(c, "family");
  c = good;
  c.dtype = c.out_dtype = DType::bf16;
  expect_field(c, "dtype");
  c = good;
  c.out_dtype = DType::bf16;
  expect_field(c, "out_dtype");
  c = good;
  c.hdim_q = 288;
  expect_field(c, "hdim_q");
  c = good;
  c.hdim_v = 0;
  expect_field(c, "hdim_v");
  c = good;
  c.warps = 16;
  expect_field(c, "warps");
  c = good;
  c.block_m = 40;  // not a multiple of 16 row slots
  expect_field(c, "block_m");
  c = good;
  c.block_m = 128;  // 8 rows x (16 O columns + 4 scores) per thread
  expect_field(c, "block_m");
  c = good;
  c.block_n = 24;
  expect_field(c, "block_n");
  c = good;
  c.block_k = 64;
  expect_field(c, "block_k");
  c = good;
  c.block_k = 24;  // does not divide 128
  expect_field(c, "block_k");
  c = good;
  c.stages = 2;
  expect_field(c, "stages");
  c = good;
  c.page_table = PageTableKind::vllm_block_table;
  expect_field(c, "page_table");
  c = good;
  c.deterministic = true;
  expect_field(c, "deterministic");
  c = good;
  c.mode = Mode::group;  // without sequence padding
  expect_field(c, "mode");
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  EXPECT_EQ(refusal(c), "");
  EXPECT_THROW(codegen::generate_source(simt_fwd_config(128, 128, 40)), Error);
}

TEST(FwdSimtCodegen, SourceSpellsTheConfig) {
  KernelConfig c = simt_fwd_config(192, 128, 32);
  c.mode = Mode::group;
  c.pad_seqlen_q = c.pad_seqlen_k = c.pad_hdim_q = true;
  enable_every_hook(c);
  const std::string source = codegen::generate_source(c);
  EXPECT_NE(source.find("#include \"fmha/fwd_simt.h\""), std::string::npos);
  EXPECT_NE(source.find("__launch_bounds__(128) " + c.symbol() +
                        "(const tilefmha::fmha::FwdParams params)"),
            std::string::npos)
      << source;
  for (const char* piece :
       {"FwdSimtTraits<", "/*hdim_q=*/192, /*hdim_v=*/128", "/*block_m=*/32", "/*block_k=*/32",
        "/*group_mode=*/true", "/*pad_hdim_q=*/true, /*pad_hdim_v=*/false", "WindowMask",
        "Logits<tilefmha::fmha::SoftCap, tilefmha::fmha::AlibiBias>", "PhiloxDropout",
        "/*store_lse=*/true, /*sink_logit=*/true", "fwd_simt<Traits>"})
    EXPECT_NE(source.find(piece), std::string::npos) << piece;
  KernelConfig plain = simt_fwd_config(192, 128, 32);
  const std::string other = codegen::generate_source(plain);
  for (const char* piece : {"NoMask", "Logits<tilefmha::fmha::PlainScale, tilefmha::fmha::NoBias>",
                            "NoDropout", "/*store_lse=*/false, /*sink_logit=*/false"})
    EXPECT_NE(other.find(piece), std::string::npos) << piece;
}

TEST(FwdSimtCodegen, LaunchShapeFollowsTheTile) {
  TensorPool pool(3);
  const Problem p =
      testing::batch_problem(pool, Family::fwd, DType::fp32, {3, 6, 2, 1000, 700, 72, 72}).build();
  KernelConfig c = simt_fwd_config(96, 96, 64);
  c.pad_hdim_q = c.pad_hdim_v = c.pad_seqlen_q = c.pad_seqlen_k = true;
  const jit::LaunchShape shape = codegen::launch_shape(c, p);
  EXPECT_EQ(shape.grid[0], 16u);  // ceil(1000 / 64)
  EXPECT_EQ(shape.grid[1], 6u);
  EXPECT_EQ(shape.grid[2], 3u);
  EXPECT_EQ(shape.block[0], 128u);
  EXPECT_EQ(codegen::threads_per_block(c), 128);
  // fp32 Q (64 x 96) and one block of K (32 x 96) and V (32 x 96): the enumeration's estimate.
  EXPECT_EQ(shape.dynamic_shared_bytes, 4u * (64 * 96 + 32 * (96 + 96)));
  // Head dims that are no multiple of 32 get 32-padded tiles.
  const jit::LaunchShape odd = codegen::launch_shape(simt_fwd_config(72, 40, 32), p);
  EXPECT_EQ(odd.dynamic_shared_bytes, 4u * (32 * 96 + 32 * (96 + 64)));
}

void mark_device(Problem& p) {
  for (TensorView* view :
       {&p.q, &p.k, &p.v, &p.o, &p.lse, &p.bias, &p.alibi_slopes, &p.sink_logits})
    view->space = MemorySpace::device;
}

std::string params_refusal(const Problem& p, Pipeline pipeline) {
  try {
    runtime::make_fwd_params(p, {}, pipeline);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// simt_f32 reads single fp32 elements: odd head dims and strides that are no multiple of 16
// bytes are fine; 16-bit dtypes are not (and the tensor-core pipelines still refuse fp32).
TEST(FwdSimtCodegen, FwdParamsAcceptFp32AtAnyStride) {
  TensorPool pool(11);
  Problem p = testing::batch_problem(pool, Family::fwd, DType::fp32, {2, 3, 1, 9, 13, 36, 20},
                                     QkvLayout::padded)
                  .causal(MaskAlign::bottom_right)
                  .build();
  EXPECT_NE(params_refusal(p, Pipeline::simt_f32).find("q is in host memory"), std::string::npos);
  mark_device(p);
  const fmha::FwdParams params = runtime::make_fwd_params(p, {}, Pipeline::simt_f32);
  EXPECT_EQ(params.q_strides.seq, p.q.stride[1]);
  EXPECT_EQ(params.k_strides.head, p.k.stride[2]);
  EXPECT_EQ(params.v_strides.batch, p.v.stride[0]);
  EXPECT_EQ(params.hdim_q, 36);
  EXPECT_EQ(params.hdim_v, 20);
  EXPECT_EQ(params.head_group, 3);
  EXPECT_EQ(params.window_right, 0);
  EXPECT_EQ(params.bottom_right, 1);
  EXPECT_NE(p.q.stride[1] % 4, 0) << "the padded layout should have an unaligned stride";

  EXPECT_NE(params_refusal(p, Pipeline::sm80_mma).find("dtype = fp32"), std::string::npos);
  Problem bf16 = testing::batch_problem(pool, Family::fwd, DType::bf16, Dims{}).build();
  mark_device(bf16);
  EXPECT_NE(params_refusal(bf16, Pipeline::simt_f32).find("dtype = bf16"), std::string::npos);
  Problem strided_dim = p;
  strided_dim.v.stride[3] = 2;
  EXPECT_NE(params_refusal(strided_dim, Pipeline::simt_f32).find("v.stride[3]"), std::string::npos);
}

// The dispatcher's own choice for fp32 problems, among the default candidates of each arch: a
// simt_f32 kernel with the narrowest head dims that fit and the problem's traits.
TEST(FwdSimtCodegen, DispatcherPicksSimtForFp32) {
  TensorPool pool(12);
  Problem p = testing::batch_problem(pool, Family::fwd, DType::fp32, {2, 14, 2, 130, 200, 72, 72})
                  .window(16, 0, MaskAlign::bottom_right)
                  .sink_tokens(2)
                  .build();
  mark_device(p);
  Problem wide =
      testing::batch_problem(pool, Family::fwd, DType::fp32, {1, 2, 2, 64, 96, 192, 128}).build();
  mark_device(wide);
  for (Arch arch : {Arch::sm80, Arch::sm90}) {
    runtime::Registry registry;
    runtime::DispatcherOptions options;
    options.candidates = runtime::default_candidates(arch, {Family::fwd});
    runtime::Dispatcher dispatcher(registry, {arch, 132, "test"}, options);
    const KernelConfig best = dispatcher.explain(p).front().kernel;
    EXPECT_EQ(dispatcher.explain(p).front().rejection, "");
    EXPECT_EQ(best.pipeline, Pipeline::simt_f32) << best.name();
    EXPECT_EQ(best.hdim_q, 96) << best.name();
    EXPECT_TRUE(best.pad_hdim_q && best.pad_hdim_v && best.pad_seqlen_q) << best.name();
    EXPECT_EQ(best.mask, MaskKind::window) << best.name();
    const KernelConfig asymmetric = dispatcher.explain(wide).front().kernel;
    EXPECT_EQ(asymmetric.pipeline, Pipeline::simt_f32);
    EXPECT_EQ(asymmetric.hdim_q, 192);
    EXPECT_EQ(asymmetric.hdim_v, 128);
  }
}

// Compile-only (no GPU): enumerated shapes with every feature hook compile for both targets and
// keep O, S and the softmax state in registers.
TEST(FwdSimtCodegen, CompilesForSm80AndSm90aWithoutSpills) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  struct Case {
    KernelConfig config;
    const char* target;
  };
  std::vector<Case> cases;
  KernelConfig plain = simt_fwd_config(128, 128, 64);
  plain.lse = true;
  cases.push_back({plain, "sm_90a"});
  KernelConfig features = simt_fwd_config(96, 96, 64);
  features.arch = Arch::sm80;
  features.mode = Mode::group;
  features.pad_seqlen_q = features.pad_seqlen_k = features.pad_hdim_q = features.pad_hdim_v = true;
  features.mask = MaskKind::window;
  features.bias = BiasKind::elementwise;
  features.dropout = true;
  features.sink_logit = true;
  features.lse = true;
  cases.push_back({features, "sm_80"});
  KernelConfig wide = simt_fwd_config(256, 256, 32);
  wide.softcap = true;
  wide.bias = BiasKind::alibi;
  wide.mask = MaskKind::causal;
  wide.pad_seqlen_q = wide.pad_seqlen_k = true;
  cases.push_back({wide, "sm_90a"});
  for (const Case& test : cases) {
    SCOPED_TRACE(test.config.name());
    ASSERT_EQ(refusal(test.config), "");
    const jit::CompiledKernel compiled =
        jit::compile_kernel(test.config.symbol(), codegen::generate_source(test.config),
                            verbose_ptxas_options(test.target));
    EXPECT_FALSE(compiled.cubin.empty());
    EXPECT_NE(compiled.ptx.find(".entry " + test.config.symbol()), std::string::npos);
    EXPECT_NE(compiled.ptx.find("shfl.sync.idx"), std::string::npos);
    // fp32 FMAs on CUDA cores, no tensor-core instruction.
    EXPECT_NE(compiled.ptx.find("fma.rn.f32"), std::string::npos);
    EXPECT_EQ(compiled.ptx.find("mma."), std::string::npos);
    const PtxasReport report = ptxas_report(compiled.log);
    EXPECT_GT(report.registers, 0) << compiled.log;
    EXPECT_EQ(report.spill_bytes, 0) << compiled.log;
    std::printf("%s (%s): %d registers, %d spill bytes\n", test.config.name().c_str(), test.target,
                report.registers, report.spill_bytes);
  }
}

}  // namespace
}  // namespace tilefmha
