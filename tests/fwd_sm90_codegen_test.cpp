// Codegen of the sm90_ws forward kernel with no GPU: configs of the sm90 tile table pass the
// support check and others are refused naming the field; generated sources compile with NVRTC
// for sm_90a into PTX that uses wgmma, TMA and setmaxnreg, with no spills and no serialized
// wgmma; launch shapes and TMA map specs follow the tile and the views' strides. The same for
// the split-KV mode (family fwd_splitkv), whose launch shapes count the splits.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "codegen/fwd_sm90.hpp"
#include "fmha/fwd_sm90_shape.h"
#include "jit/build_pipeline.hpp"
#include "jit/compiler.hpp"
#include "runtime/fwd_sm90_params.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "support/ptxas_report.hpp"
#include "support/refusal.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::nvrtc_available;
using testing::ptxas_report;
using testing::PtxasReport;
using testing::sm90_fwd_config;

std::string not_supported_message(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_sm90(c); });
}

// The whole-panel rows of data/arch/sm90.json's sm90_ws fp16/bf16 fwd table.
TEST(FwdSm90Codegen, TileTableShapesAreSupported) {
  const struct {
    int hq, hv, m, n;
  } shapes[] = {{64, 64, 192, 128},   {128, 128, 128, 128}, {128, 128, 128, 176},
                {192, 128, 128, 112}, {192, 192, 128, 112}, {256, 256, 128, 80}};
  for (const auto& s : shapes) {
    for (DType dtype : {DType::fp16, DType::bf16}) {
      KernelConfig c = sm90_fwd_config(dtype, s.hq, s.hv, s.m, s.n);
      c.mask = MaskKind::causal;
      c.lse = true;
      EXPECT_EQ(not_supported_message(c), "") << c.name();
    }
  }
}

TEST(FwdSm90Codegen, UnsupportedFieldsAreNamed) {
  auto expect_field = [](const KernelConfig& c, const std::string& field) {
    testing::expect_names_field(not_supported_message(c), field);
  };
  const KernelConfig good = sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  KernelConfig c = good;
  c.pipeline = Pipeline::sm80_mma;
  expect_field(c, "pipeline");
  c = good;
  c.hdim_q = c.hdim_v = 96;
  expect_field(c, "hdim_q");
  c = good;
  c.hdim_v = 160;
  expect_field(c, "hdim_v");
  c = good;
  c.warps = 8;
  expect_field(c, "warps");
  c = good;
  c.block_m = 256;
  c.warps = 20;
  expect_field(c, "block_m");
  c = good;
  c.block_n = 72;
  expect_field(c, "block_n");
  c = good;
  c.stages = 4;
  c.block_n = 176;
  expect_field(c, "stages");  // 4 x 2 x 44 KiB of K/V does not fit
  c = sm90_fwd_config(DType::bf16, 256, 256, 128, 128, 1);
  expect_field(c, "block_n");  // O (128) + S (64) + P (32) registers would spill
  c = good;
  c.page_table = PageTableKind::vllm_block_table;
  expect_field(c, "page_table");
  c = good;
  c.dtype = DType::fp32;
  c.out_dtype = DType::fp32;
  expect_field(c, "dtype");
  c = good;
  c.hdim_q = 96;  // a problem's head dim, not a kernel's: padded kernels are whole panels
  expect_field(c, "hdim_q");
  EXPECT_THROW(codegen::generate_sm90_source(c), Error);
}

// FP8 inputs: bf16 O, 128-key blocks, whole 128-byte panels of 8-bit elements (128 or 256) and a
// descale kind the kernel reads; the source names the fp8 element, O's type and the descale.
TEST(FwdSm90Codegen, Fp8NeedsItsLayout) {
  auto expect_field = [](const KernelConfig& c, const std::string& field) {
    testing::expect_names_field(not_supported_message(c), field);
  };
  KernelConfig good = sm90_fwd_config(DType::fp8_e4m3, 128, 128, 128, 128);
  good.out_dtype = DType::bf16;
  good.fp8_scale = Fp8ScaleKind::per_block;
  EXPECT_NO_THROW(codegen::check_supported_sm90(good));
  const std::string source = codegen::generate_sm90_source(good);
  EXPECT_NE(source.find("tilefmha::tile::float_e4m3_t"), std::string::npos);
  EXPECT_NE(source.find("tilefmha::tile::bfloat16_t, tilefmha::fmha::Sm90Descale::per_block>"),
            std::string::npos)
      << source;
  KernelConfig c = good;
  c.out_dtype = DType::fp32;
  expect_field(c, "out_dtype");
  c = good;
  c.block_n = 176;
  expect_field(c, "block_n");
  c = good;
  c.fp8_scale = Fp8ScaleKind::per_page;
  expect_field(c, "fp8_scale");  // per-page descales need a paged cache
  c.family = Family::fwd_pagedkv;
  c.page_table = PageTableKind::vllm_block_table;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  EXPECT_NO_THROW(codegen::check_supported_sm90(c));
  EXPECT_NE(codegen::generate_sm90_source(c).find("tilefmha::fmha::Sm90Descale::per_page>"),
            std::string::npos);
  c = sm90_fwd_config(DType::fp8_e4m3, 64, 64, 128, 128);
  c.out_dtype = DType::bf16;
  c.fp8_scale = Fp8ScaleKind::per_tensor;
  expect_field(c, "hdim_q");  // 64 fp8 elements are half a 128-byte panel
  // The transposed V ring: a third ring beside K and V, and a vt_full barrier per stage.
  const fmha::Sm90SmemLayout bf16 = fmha::sm90_smem_layout(128, 128, 128, 128, 2, 2);
  const fmha::Sm90SmemLayout fp8 = codegen::sm90_layout(good);
  EXPECT_EQ(fp8.vt_offset - fp8.v_offset, 2 * 128 * 128);
  EXPECT_EQ(fp8.k_stage_bytes, bf16.k_stage_bytes / 2);
  EXPECT_TRUE(fp8.separate_o());
  // Q (1 byte), K, V and V^T rings of 2 stages, O (bf16), the barriers and one atom of slack.
  EXPECT_EQ(fp8.bytes, 128 * 128 + 3 * 2 * 128 * 128 + 128 * 128 * 2 +
                           8 * fmha::sm90_barrier_count(2, true) + fmha::kSm90AtomBytes);
}

TEST(FwdSm90Codegen, SourceSpellsTheConfig) {
  KernelConfig c = sm90_fwd_config(DType::fp16, 64, 64, 192, 128);
  c.mode = Mode::group;
  testing::enable_every_hook(c);
  const std::string source = codegen::generate_sm90_source(c);
  EXPECT_NE(source.find("#include \"fmha/fwd_sm90.h\""), std::string::npos);
  EXPECT_NE(source.find("__launch_bounds__(512, 1) " + c.symbol() +
                        "(const __grid_constant__ tilefmha::fmha::Sm90FwdParams params)"),
            std::string::npos)
      << source;
  for (const char* piece :
       {"tilefmha::tile::half_t", "/*hdim_q=*/64", "/*block_m=*/192", "/*block_n=*/128",
        "/*group_mode=*/true", "WindowMask",
        "Logits<tilefmha::fmha::SoftCap, tilefmha::fmha::AlibiBias>", "PhiloxDropout",
        "/*store_lse=*/true, /*sink_logit=*/true", "Sm90Schedule::pingpong"})
    EXPECT_NE(source.find(piece), std::string::npos) << piece;
  // The enumerated kernel runs one tile per CTA; its persistent form loops over tiles.
  EXPECT_NE(source.find("/*persistent=*/false"), std::string::npos);
  KernelConfig looping = c;
  looping.persistent = true;
  EXPECT_NE(codegen::generate_sm90_source(looping).find("/*persistent=*/true"), std::string::npos);
  EXPECT_NE(looping.name().find(".persist-1"), std::string::npos);
  EXPECT_EQ(KernelConfig::parse_name(looping.name()), looping);
  EXPECT_TRUE(fmha::sm90_smem_layout(64, 64, 192, 128, 2).separate_o());
  // hdim 256: O must reuse the Q buffer.
  EXPECT_FALSE(fmha::sm90_smem_layout(256, 256, 128, 80, 2).separate_o());
  const std::string serial =
      codegen::generate_sm90_source(c, codegen::Sm90Variant{fmha::Sm90Schedule::serial, true});
  EXPECT_NE(serial.find("Sm90Schedule::serial, /*persistent=*/true"), std::string::npos);
}

TEST(FwdSm90Codegen, LaunchShapeFollowsTheTile) {
  testing::TensorPool pool(3);
  const Problem p =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {3, 6, 2, 1000, 700, 128, 128})
          .build();
  const KernelConfig c = sm90_fwd_config(DType::bf16, 128, 128, 128, 176);
  const jit::LaunchShape shape = codegen::launch_shape_sm90(c, p, 132);
  EXPECT_EQ(shape.grid[0], 8u * 6 * 3);  // ceil(1000 / 128) query blocks x heads x batch
  EXPECT_EQ(shape.grid[1], 1u);
  EXPECT_EQ(shape.grid[2], 1u);
  EXPECT_EQ(shape.block[0], 384u);
  // Q (128 x 128) + 2 stages of K and V (176 x 128 each), 16-bit, 10 barriers, atom slack.
  EXPECT_EQ(shape.dynamic_shared_bytes, 2u * (128 * 128 + 4 * 176 * 128) + 10 * 8 + 1024);
  EXPECT_LE(shape.dynamic_shared_bytes, 232448u);
  // The kernel waits for the previous grid itself, so it may launch behind it.
  EXPECT_TRUE(shape.programmatic_dependency);
  // Persistent: at most one CTA per SM, never more CTAs than tiles.
  const codegen::Sm90Variant persistent{fmha::Sm90Schedule::pingpong, true};
  EXPECT_EQ(codegen::launch_shape_sm90(c, p, persistent, 132).grid[0], 132u);
  EXPECT_EQ(codegen::launch_shape_sm90(c, p, persistent, 1000).grid[0], 144u);
  // A kernel that runs one tile per CTA needs every tile's CTA whatever the cap.
  const codegen::Sm90Variant per_tile{fmha::Sm90Schedule::pingpong, false};
  EXPECT_EQ(codegen::launch_shape_sm90(c, p, per_tile, 132).grid[0], 144u);
  // The launch's own choice: O has no buffer of its own at block_n 176, so equal tiles run one
  // CTA each.
  EXPECT_FALSE(fmha::sm90_smem_layout(128, 128, 128, 176, 2).separate_o());
}

// Q (128 x 128), K and V rings (2 x 128 x 128 each) and O (128 x 128) fit in 227 KiB. The
// persistent form of a kernel loops over tiles on at most one CTA per SM; the dispatcher picks
// that form where sm90_persistent_grid_pays.
TEST(FwdSm90Codegen, PersistentGridWherePersistenceWasMeasuredToPay) {
  testing::TensorPool pool(4);
  const KernelConfig c = sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  const fmha::Sm90SmemLayout layout = fmha::sm90_smem_layout(128, 128, 128, 128, 2);
  ASSERT_TRUE(layout.separate_o());
  EXPECT_EQ(layout.bytes, 2 * (128 * 128 * 2 + 4 * 128 * 128) + 10 * 8 + 1024);
  EXPECT_FALSE(codegen::default_sm90_variant(c).persistent);
  KernelConfig looping = c;
  looping.persistent = true;
  EXPECT_TRUE(codegen::default_sm90_variant(looping).persistent);
  auto grid = [&](const Problem& p, int64_t sm_count) {
    return codegen::launch_shape_sm90(looping, p, sm_count).grid[0];
  };
  const auto builder = [&](int64_t seqlen, int64_t heads) {
    return testing::batch_problem(pool, Family::fwd, DType::bf16,
                                  {1, heads, heads, seqlen, seqlen, 128, 128});
  };
  const Problem plain = builder(4096, 8).build();  // 32 x 8 tiles
  EXPECT_TRUE(codegen::sm90_persistent_grid_pays(c, plain));
  EXPECT_EQ(grid(plain, 132), 132u);
  EXPECT_EQ(grid(plain, 0), 32u * 8);  // SM count unknown: one CTA per tile
  const Problem short_causal = builder(2048, 16).causal().build();  // 16 x 16 tiles
  EXPECT_TRUE(codegen::sm90_persistent_grid_pays(c, short_causal));
  EXPECT_EQ(grid(short_causal, 132), 132u);
  // Long causal rows: left to the hardware's dynamic CTA scheduling of one CTA per tile.
  const Problem long_causal = builder(16384, 2).causal().build();  // 128 x 2 tiles
  EXPECT_FALSE(codegen::sm90_persistent_grid_pays(c, long_causal));
  // The enumerated (non-looping) form always gets one CTA per tile.
  EXPECT_EQ(codegen::launch_shape_sm90(c, plain, 132).grid[0], 32u * 8);
  // O without its own buffer (hdim 256): equal tiles gain nothing, masked ones still do.
  const KernelConfig wide = sm90_fwd_config(DType::bf16, 256, 256, 128, 80);
  ProblemBuilder wide_builder =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 8, 8, 1024, 1024, 256, 256});
  EXPECT_FALSE(codegen::sm90_persistent_grid_pays(wide, wide_builder.build()));
  EXPECT_TRUE(codegen::sm90_persistent_grid_pays(wide, wide_builder.causal().build()));
  // ... but not at 512 masked rows, whose tiles are too short to gain.
  EXPECT_FALSE(codegen::sm90_persistent_grid_pays(
      wide, testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 8, 8, 512, 512, 256, 256})
                .causal()
                .build()));
}

TEST(FwdSm90Codegen, TensorMapsFollowTheViewStrides) {
  testing::TensorPool pool(5);
  const KernelConfig c = sm90_fwd_config(DType::fp16, 64, 64, 192, 128);
  for (testing::QkvLayout layout : {testing::QkvLayout::bshd, testing::QkvLayout::bhsd}) {
    const Problem p =
        testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 8, 2, 300, 500, 64, 64}, layout)
            .build();
    const runtime::Sm90TensorMapSpecs specs = runtime::sm90_tensor_map_specs(p, c);
    const bool bshd = layout == testing::QkvLayout::bshd;
    EXPECT_EQ(specs.q.dims, (std::vector<uint64_t>{64, 300, 8, 2}));
    EXPECT_EQ(specs.k.dims, (std::vector<uint64_t>{64, 500, 2, 2}));
    // [dim, seq, head, batch] strides of dims 1.. in bytes.
    const std::vector<uint64_t> q_strides =
        bshd ? std::vector<uint64_t>{8 * 64 * 2, 64 * 2, 300 * 8 * 64 * 2}
             : std::vector<uint64_t>{64 * 2, 300 * 64 * 2, 8 * 300 * 64 * 2};
    EXPECT_EQ(specs.q.strides_bytes, q_strides);
    EXPECT_EQ(specs.o.strides_bytes, q_strides);
    EXPECT_EQ(specs.q.box, (std::vector<uint32_t>{64, 192, 1, 1}));
    EXPECT_EQ(specs.k.box, (std::vector<uint32_t>{64, 128, 1, 1}));
    EXPECT_EQ(specs.v.box, (std::vector<uint32_t>{64, 128, 1, 1}));
    EXPECT_EQ(specs.o.box, (std::vector<uint32_t>{64, 64, 1, 1}));
    EXPECT_EQ(specs.q.element, jit::TensorMapElement::fp16);
    EXPECT_EQ(specs.v.swizzle, jit::TensorMapSwizzle::bytes128);
    // Packed GQA (4 query heads per KV head): Q and O are 5D [dim, head in group, KV head, seq,
    // batch] with boxes of the 4 heads by 192 / 4 (Q) or 64 / 4 (O) positions.
    KernelConfig packed = c;
    packed.pack_gqa = true;
    const runtime::Sm90TensorMapSpecs packed_specs = runtime::sm90_tensor_map_specs(p, packed);
    EXPECT_EQ(packed_specs.q.dims, (std::vector<uint64_t>{64, 4, 2, 300, 2}));
    EXPECT_EQ(packed_specs.q.strides_bytes,
              (std::vector<uint64_t>{q_strides[1], 4 * q_strides[1], q_strides[0], q_strides[2]}));
    EXPECT_EQ(packed_specs.q.box, (std::vector<uint32_t>{64, 4, 1, 48, 1}));
    EXPECT_EQ(packed_specs.o.box, (std::vector<uint32_t>{64, 4, 1, 16, 1}));
    EXPECT_EQ(packed_specs.k.dims, specs.k.dims);
  }
  // A seq stride of 68 elements (136 bytes) is no multiple of 16 bytes: named, not supported.
  Problem p =
      testing::batch_problem(pool, Family::fwd, DType::fp16, {1, 1, 1, 64, 64, 64, 64}).build();
  TensorView k = pool.strided(DType::fp16, 68 * 64, {1, 64, 1, 64}, {68 * 64, 68, 64, 1}, -1, 1);
  p.k = k;
  try {
    runtime::sm90_tensor_map_specs(p, c);
    FAIL() << "accepted an unaligned stride";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_supported);
    EXPECT_NE(std::string(e.what()).find("k.stride[1] (seq)"), std::string::npos) << e.what();
  }
  // The kernel's head dim must be the problem's.
  const KernelConfig wide = sm90_fwd_config(DType::fp16, 128, 128, 128, 128);
  EXPECT_THROW(runtime::sm90_tensor_map_specs(p, wide), Error);
}

// Compile-only (no GPU) for sm_90a: the instructions that make it a Hopper kernel are there.
TEST(FwdSm90Codegen, CompilesForSm90aWithWgmmaTmaAndSetmaxnreg) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<KernelConfig> configs;
  KernelConfig causal = sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  causal.mask = MaskKind::causal;
  causal.lse = true;
  configs.push_back(causal);
  KernelConfig wide = sm90_fwd_config(DType::fp16, 64, 64, 192, 128);
  wide.mode = Mode::group;
  configs.push_back(wide);
  KernelConfig features = sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  testing::enable_every_hook(features);
  configs.push_back(features);
  KernelConfig packed = causal;  // the persistent, GQA-packed launch forms compile alike
  packed.pack_gqa = packed.persistent = true;
  configs.push_back(packed);
  std::vector<jit::BuildJob> jobs;
  for (const KernelConfig& c : configs)
    jobs.push_back({c.symbol(), codegen::generate_sm90_source(c)});
  const jit::CompileOptions options = testing::verbose_ptxas_options("sm_90a");
  for (size_t n = 0; n < jobs.size(); ++n) {
    SCOPED_TRACE(configs[n].name());
    const jit::CompiledKernel compiled = jit::compile_kernel(jobs[n].name, jobs[n].source, options);
    EXPECT_FALSE(compiled.cubin.empty());
    for (const char* instruction :
         {"wgmma.mma_async.sync.aligned.m64n128k16", "cp.async.bulk.tensor.4d",
          "mbarrier.try_wait.parity", "setmaxnreg.inc", "setmaxnreg.dec", "bar.arrive"})
      EXPECT_NE(compiled.ptx.find(instruction), std::string::npos) << instruction;
    EXPECT_EQ(compiled.log.find("serialized"), std::string::npos) << compiled.log;
    EXPECT_EQ(compiled.log.find("C7508"), std::string::npos) << compiled.log;  // setmaxnreg ignored
    const PtxasReport report = ptxas_report(compiled.log);
    EXPECT_GT(report.registers, 0) << compiled.log;
    // Two consumer warpgroups have 240 registers each: the accumulators fit with no spill.
    // Three have 160, where ptxas spills a few bytes of per-tile state (not the accumulators).
    if (fmha::sm90_consumer_groups(configs[n].block_m) == 2) {
      EXPECT_EQ(report.spill_bytes, 0) << compiled.log;
    } else {
      EXPECT_LE(report.spill_bytes, 64) << compiled.log;
    }
    std::printf("%s: %d registers at launch, %d spill bytes\n", configs[n].name().c_str(),
                report.registers, report.spill_bytes);
  }
}

// fp8 hdim 256: two stages of K, V and transposed V leave no room for O (bf16, twice the fp8
// Q tile) beside Q, so O leaves through the Q buffer in two passes of two panels. It compiles
// in both modes.
TEST(FwdSm90Codegen, Fp8Hdim256PassesOThroughTheQBuffer) {
  KernelConfig c = sm90_fwd_config(DType::fp8_e4m3, 256, 256, 128, 128, 2);
  c.out_dtype = DType::bf16;
  c.fp8_scale = Fp8ScaleKind::per_tensor;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  EXPECT_NO_THROW(codegen::check_supported_sm90(c));
  const fmha::Sm90SmemLayout layout = codegen::sm90_layout(c);
  EXPECT_FALSE(layout.separate_o());
  EXPECT_EQ(layout.o_pass_panels, 2);
  EXPECT_EQ(layout.k_offset, 128 * 256);  // the rings start right after the fp8 Q tile
  EXPECT_EQ(layout.bytes, 128 * 256 + 3 * 2 * 128 * 256 + 8 * fmha::sm90_barrier_count(2, true) +
                              fmha::kSm90AtomBytes);
  EXPECT_LE(layout.bytes, fmha::kSm90MaxSharedBytes);
  // 16-bit tiles pass O in one go, through its own buffer or Q's (the same size).
  EXPECT_EQ(fmha::sm90_smem_layout(256, 256, 128, 80, 2).o_pass_panels, 4);
  EXPECT_EQ(fmha::sm90_smem_layout(128, 128, 128, 128, 2).o_pass_panels, 2);
  EXPECT_EQ(fmha::sm90_smem_layout(192, 128, 128, 112, 2).o_pass_panels, 2);
  // One stage used to fit only with O in a buffer of its own.
  KernelConfig one_stage = c;
  one_stage.stages = 1;
  EXPECT_TRUE(codegen::sm90_layout(one_stage).separate_o());

  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  for (Mode mode : {Mode::batch, Mode::group}) {
    c.mode = mode;
    SCOPED_TRACE(c.name());
    const jit::CompiledKernel compiled = jit::compile_kernel(
        c.symbol(), codegen::generate_sm90_source(c), testing::verbose_ptxas_options("sm_90a"));
    EXPECT_FALSE(compiled.cubin.empty());
    EXPECT_NE(compiled.ptx.find("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"),
              std::string::npos);
    // Batch mode stores O's passes with TMA; group mode with guarded 16-byte stores.
    EXPECT_EQ(compiled.ptx.find("cp.async.bulk.tensor.4d.global.shared::cta") != std::string::npos,
              mode == Mode::batch);
  }
}

}  // namespace
// Packed GQA is derived for short query rows with a group of 2..64 (one dividing 64 beyond 64-row
// tiles) and no per-head feature; its launch covers block_m / g positions of every KV head per
// tile.
TEST(FwdSm90Codegen, PackedGqaForShortQueryRows) {
  testing::TensorPool pool(5);
  const KernelConfig c = sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  auto problem = [&](int64_t hq, int64_t hk, int64_t sq) {
    return testing::batch_problem(pool, Family::fwd, DType::bf16, {2, hq, hk, sq, 300, 128, 128});
  };
  EXPECT_TRUE(codegen::sm90_pack_gqa_pays(c, problem(8, 2, 1).build()));
  EXPECT_TRUE(codegen::sm90_pack_gqa_pays(c, problem(8, 2, 100).causal().build()));
  EXPECT_FALSE(codegen::sm90_pack_gqa_pays(c, problem(8, 2, 128).build()));  // full tiles
  EXPECT_FALSE(codegen::sm90_pack_gqa_pays(c, problem(8, 8, 1).build()));    // no group
  // 3 does not divide 64: a 128-row tile splits rows between warpgroups mid-group; a 64-row tile
  // packs 21 positions of the 3 heads (63 rows).
  EXPECT_FALSE(codegen::sm90_pack_gqa_pays(c, problem(6, 2, 1).build()));
  const KernelConfig narrow = sm90_fwd_config(DType::bf16, 128, 128, 64, 128);
  EXPECT_TRUE(codegen::sm90_pack_gqa_pays(narrow, problem(6, 2, 1).build()));
  EXPECT_TRUE(codegen::sm90_pack_gqa_pays(narrow, problem(28, 4, 1).build()));
  EXPECT_FALSE(codegen::sm90_pack_gqa_pays(narrow, problem(130, 2, 1).build()));  // over 64
  KernelConfig dropout = c;
  dropout.dropout = true;
  EXPECT_FALSE(codegen::sm90_pack_gqa_pays(dropout, problem(8, 2, 1).build()));

  KernelConfig packed = c;
  packed.pack_gqa = true;
  EXPECT_NE(packed.name().find(".packgqa-1"), std::string::npos);
  EXPECT_NE(codegen::generate_sm90_source(packed).find("/*pack_gqa=*/true"), std::string::npos);
  // 100 positions x 4 heads: tiles of 32 positions, 4 per KV head, 2 KV heads, 2 sequences.
  EXPECT_EQ(codegen::launch_shape_sm90(packed, problem(8, 2, 100).build(), 0).grid[0], 4u * 2 * 2);
  // Groups of 7 in a 64-row tile: 9 positions a tile, so 20 positions are 3 tiles a KV head.
  KernelConfig packed_narrow = narrow;
  packed_narrow.pack_gqa = true;
  EXPECT_EQ(codegen::launch_shape_sm90(packed_narrow, problem(28, 4, 20).build(), 0).grid[0],
            3u * 4 * 2);
  packed.dropout = true;
  EXPECT_THROW(codegen::check_supported_sm90(packed), Error);
}

namespace {

// Split-KV (family fwd_splitkv): the sm90_ws kernel's split mode.

// data/arch/sm90.json's sm90_ws fp16/bf16 fwd_splitkv tiles: one consumer warpgroup, block_n 128
// (64 at hdim 256).
KernelConfig splitkv_config(DType dtype, int hdim_q, int hdim_v, int block_n = 128) {
  KernelConfig c = sm90_fwd_config(dtype, hdim_q, hdim_v, 64, block_n);
  c.family = Family::fwd_splitkv;
  return c;
}

// A fwd_splitkv problem with host views: Q, K, V and the fp32 partials, no O or LSE view.
ProblemBuilder splitkv_problem(testing::TensorPool& pool, DType t, const testing::Dims& d,
                               int64_t num_splits) {
  ProblemBuilder builder(Family::fwd_splitkv);
  builder.dtype(t)
      .shape(d.batch, d.nhead_q, d.nhead_k, d.seqlen_q, d.seqlen_k, d.hdim_q, d.hdim_v)
      .q(pool.qkv(t, testing::QkvLayout::bshd, d.batch, d.seqlen_q, d.nhead_q, d.hdim_q))
      .k(pool.qkv(t, testing::QkvLayout::bshd, d.batch, d.seqlen_k, d.nhead_k, d.hdim_q))
      .v(pool.qkv(t, testing::QkvLayout::bshd, d.batch, d.seqlen_k, d.nhead_k, d.hdim_v))
      .splits(num_splits,
              pool.filled(DType::fp32, {num_splits, d.batch, d.nhead_q, d.seqlen_q, d.hdim_v}, 0),
              pool.filled(DType::fp32, {num_splits, d.batch, d.nhead_q, d.seqlen_q}, 0));
  return builder;
}

TEST(FwdSm90SplitKvCodegen, TileTableShapesAreSupportedAndSpellTheMode) {
  const struct {
    int hq, hv, n;
  } shapes[] = {{64, 64, 128}, {128, 128, 128}, {192, 128, 128}, {192, 192, 128}, {256, 256, 64}};
  for (const auto& s : shapes) {
    for (DType dtype : {DType::fp16, DType::bf16}) {
      KernelConfig c = splitkv_config(dtype, s.hq, s.hv, s.n);
      c.mask = MaskKind::causal;
      EXPECT_EQ(not_supported_message(c), "") << c.name();
      c.pack_gqa = true;
      EXPECT_EQ(not_supported_message(c), "") << c.name();
    }
  }
  KernelConfig c = splitkv_config(DType::bf16, 128, 128);
  c.mode = Mode::group;
  c.bias = BiasKind::alibi;
  c.softcap = true;
  c.mask = MaskKind::window;
  EXPECT_EQ(not_supported_message(c), "") << c.name();
  const std::string source = codegen::generate_sm90_source(c);
  EXPECT_NE(source.find("/*pack_gqa=*/false, /*split_kv=*/true>;"), std::string::npos) << source;
  EXPECT_NE(source.find("/*persistent=*/false"), std::string::npos);
  EXPECT_NE(source.find(c.symbol()), std::string::npos);
  // A fwd config spells no split flag: its translation unit is what it was before split-KV.
  KernelConfig forward = c;
  forward.family = Family::fwd;
  EXPECT_EQ(codegen::generate_sm90_source(forward).find("split_kv"), std::string::npos);
  EXPECT_NE(forward.symbol(), c.symbol());
}

TEST(FwdSm90SplitKvCodegen, UnsupportedFieldsAreNamed) {
  auto expect_field = [](const KernelConfig& c, const std::string& field) {
    testing::expect_names_field(not_supported_message(c), field);
  };
  const KernelConfig good = splitkv_config(DType::bf16, 128, 128);
  KernelConfig c = good;
  c.family = Family::fwd_appendkv;
  expect_field(c, "family");
  c = good;
  c.family = Family::fwd_pagedkv;  // a paged family needs a table
  expect_field(c, "page_table");
  c = good;
  c.dropout = true;
  expect_field(c, "dropout");
  c = good;
  c.sink_logit = true;
  expect_field(c, "sink_logit");
  c = good;
  c.lse = true;
  expect_field(c, "lse");
  c = good;
  c.persistent = true;
  expect_field(c, "persistent");
  c = good;
  c.block_n = 96;  // 128-key split chunks would cut its blocks
  expect_field(c, "block_n");
  c = splitkv_config(DType::bf16, 256, 256, 80);
  expect_field(c, "block_n");
  c = good;
  c.mode = Mode::group;
  c.pack_gqa = true;
  expect_field(c, "mode");  // packed GQA stays batch mode
  c = good;
  c.page_table = PageTableKind::vllm_block_table;  // split partials over pages: padded only
  expect_field(c, "pad_seqlen_k");
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  c.page_size = 16;  // small pages gather rows, which sm80_mma does
  expect_field(c, "page_size");
  // The looping variant is refused where the source is made, naming the field.
  testing::expect_names_field(testing::not_supported_message([&] {
                                codegen::generate_sm90_source(
                                    good, codegen::Sm90Variant{fmha::Sm90Schedule::overlap, true});
                              }),
                              "persistent");
}

TEST(FwdSm90SplitKvCodegen, LaunchShapesCountTheSplits) {
  testing::TensorPool pool(7);
  // Decode: batch 1, 32 query heads over 8 KV heads, one query, 16 splits (of 128k keys in
  // practice; the grid does not depend on the key count, so 8k keep the host tensors small).
  const Problem decode =
      splitkv_problem(pool, DType::bf16, {1, 32, 8, 1, 8192, 128, 128}, 16).build();
  KernelConfig packed = splitkv_config(DType::bf16, 128, 128);
  packed.pack_gqa = true;
  EXPECT_TRUE(codegen::sm90_pack_gqa_pays(packed, decode));
  // One packed tile per KV head and split: 8 x 16 = 128 CTAs, close to the 132 SMs.
  jit::LaunchShape shape = codegen::launch_shape_sm90(packed, decode, 132);
  EXPECT_EQ(shape.grid[0], 8u * 16);
  EXPECT_EQ(shape.grid[1], 1u);
  EXPECT_EQ(shape.block[0], 256u);
  EXPECT_EQ(shape.dynamic_shared_bytes,
            static_cast<unsigned>(fmha::sm90_smem_layout(128, 128, 64, 128, 2).bytes));
  const codegen::Sm90Variant per_tile = codegen::default_sm90_variant(packed);
  EXPECT_FALSE(per_tile.persistent);
  EXPECT_EQ(codegen::launch_shape_sm90(packed, decode, per_tile, 132).grid[0], 8u * 16);
  // An explicit split count (a fwd problem planned in two stages) wins over the problem's.
  EXPECT_EQ(codegen::launch_shape_sm90(packed, decode, per_tile, 132, 3).grid[0], 8u * 3);
  // Unpacked: one tile per query head and split.
  const KernelConfig unpacked = splitkv_config(DType::bf16, 128, 128);
  EXPECT_EQ(codegen::launch_shape_sm90(unpacked, decode, 0).grid[0], 32u * 16);
  // 16 queries x 4 heads fill one 64-row packed tile; 100 need two 64-row unpacked tiles.
  const Problem chunk =
      splitkv_problem(pool, DType::bf16, {2, 32, 8, 16, 8192, 128, 128}, 3).build();
  EXPECT_EQ(codegen::launch_shape_sm90(packed, chunk, 0).grid[0], 1u * 8 * 2 * 3);
  const Problem prefill =
      splitkv_problem(pool, DType::bf16, {2, 4, 4, 100, 1000, 128, 128}, 3).build();
  EXPECT_EQ(codegen::launch_shape_sm90(unpacked, prefill, 0).grid[0], 2u * 4 * 2 * 3);
  // Group mode: query blocks of the longest sequence, every sequence and split.
  const Problem group = ProblemBuilder(Family::fwd_splitkv)
                            .dtype(DType::fp16)
                            .shape(1, 4, 2, 0, 0, 64, 64)
                            .group({0, 70, 70, 200}, {0, 300, 310, 900})
                            .q(pool.uniform(DType::fp16, {1, 200, 4, 64}, -1, 1))
                            .k(pool.uniform(DType::fp16, {1, 900, 2, 64}, -1, 1))
                            .v(pool.uniform(DType::fp16, {1, 900, 2, 64}, -1, 1))
                            .splits(5, pool.filled(DType::fp32, {5, 1, 4, 200, 64}, 0),
                                    pool.filled(DType::fp32, {5, 1, 4, 200}, 0))
                            .build();
  KernelConfig grouped = splitkv_config(DType::fp16, 64, 64);
  grouped.mode = Mode::group;
  EXPECT_EQ(codegen::launch_shape_sm90(grouped, group, 0).grid[0], 3u * 4 * 3 * 5);

  // Split counts the kernel family cannot take are named.
  auto invalid_argument_message = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
      return std::string(e.what());
    }
    return std::string();
  };
  KernelConfig forward = sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  const Problem fwd_problem =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 4, 4, 100, 1000, 128, 128})
          .build();
  EXPECT_EQ(
      codegen::launch_shape_sm90(forward, fwd_problem, codegen::default_sm90_variant(forward), 0, 1)
          .grid[0],
      4u);
  testing::expect_names_field(invalid_argument_message([&] {
                                codegen::launch_shape_sm90(forward, fwd_problem,
                                                           codegen::default_sm90_variant(forward),
                                                           0, 3);
                              }),
                              "num_splits");
  testing::expect_names_field(invalid_argument_message([&] {
                                codegen::launch_shape_sm90(unpacked, decode, per_tile, 0, 0);
                              }),
                              "num_splits");
  testing::expect_names_field(
      testing::not_supported_message([&] {
        codegen::launch_shape_sm90(
            unpacked, decode, codegen::Sm90Variant{fmha::Sm90Schedule::overlap, true}, 132, 16);
      }),
      "persistent");
}

// No O view and no O map: the partials leave the kernel through plain fp32 stores.
TEST(FwdSm90SplitKvCodegen, MapsSkipOAndParamsCheckThePartials) {
  testing::TensorPool pool(8);
  const Problem p = splitkv_problem(pool, DType::fp16, {2, 8, 2, 4, 500, 64, 64}, 3).build();
  ASSERT_TRUE(p.o.empty());
  KernelConfig c = splitkv_config(DType::fp16, 64, 64);
  c.pack_gqa = true;
  const runtime::Sm90TensorMapSpecs specs = runtime::sm90_tensor_map_specs(p, c);
  EXPECT_TRUE(specs.o.dims.empty());
  EXPECT_EQ(specs.q.dims, (std::vector<uint64_t>{64, 4, 2, 4, 2}));  // packed: 4 heads a group
  EXPECT_EQ(specs.q.box, (std::vector<uint32_t>{64, 4, 1, 16, 1}));
  EXPECT_EQ(specs.k.box, (std::vector<uint32_t>{64, 128, 1, 1}));

  // Problem family and kernel family must agree on who writes partials (checked before any
  // device work, so host views do here).
  auto message_of = [](auto&& call, ErrorKind kind) {
    try {
      call();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      return std::string(e.what());
    }
    return std::string();
  };
  const runtime::FwdDeviceIndices no_indices{};
  const KernelConfig forward = sm90_fwd_config(DType::fp16, 64, 64, 128, 128);
  EXPECT_NE(message_of([&] { runtime::make_fwd_sm90_params(p, no_indices, forward); },
                       ErrorKind::invalid_argument)
                .find("family = fwd: the kernel writes whole rows of O"),
            std::string::npos);
  const Problem whole =
      testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 8, 2, 4, 500, 64, 64}).build();
  EXPECT_NE(message_of([&] { runtime::make_fwd_sm90_params(whole, no_indices, c); },
                       ErrorKind::invalid_argument)
                .find("split is null and family = fwd"),
            std::string::npos);
  // Views marked as device memory (never dereferenced on the host): odd partial strides cannot
  // take the kernel's paired float stores.
  Problem device = p;
  for (TensorView* view : {&device.q, &device.k, &device.v}) view->space = MemorySpace::device;
  device.split.lse_acc.space = MemorySpace::device;
  device.split.o_acc = pool.strided(DType::fp32, 3 * 2 * 8 * 4 * 65, {3, 2, 8, 4, 64},
                                    {2 * 8 * 4 * 65, 8 * 4 * 65, 4 * 65, 65, 1}, -1, 1);
  device.split.o_acc.space = MemorySpace::device;
  const std::string odd = message_of([&] { runtime::make_fwd_sm90_params(device, no_indices, c); },
                                     ErrorKind::not_supported);
  EXPECT_EQ(odd.rfind("split.o_acc.stride[3] = 65", 0), 0u) << odd;
}

// Compile-only for sm_90a: the split mode of several tiles, with the masks, packed GQA and group
// mode, keeps the Hopper instructions, stores its partials as fp32 pairs rather than by TMA, and
// does not spill.
TEST(FwdSm90SplitKvCodegen, CompilesForSm90a) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<KernelConfig> configs;
  KernelConfig c = splitkv_config(DType::fp16, 64, 64);
  c.mask = MaskKind::causal;
  configs.push_back(c);
  c = splitkv_config(DType::bf16, 128, 128);
  c.mask = MaskKind::causal;
  c.pack_gqa = true;
  configs.push_back(c);
  c = splitkv_config(DType::bf16, 64, 64);
  c.pack_gqa = true;
  configs.push_back(c);
  c = splitkv_config(DType::fp16, 128, 128);
  c.mode = Mode::group;
  c.mask = MaskKind::window;
  configs.push_back(c);
  c = splitkv_config(DType::bf16, 256, 256, 64);
  configs.push_back(c);
  c = splitkv_config(DType::fp16, 256, 256, 64);
  c.mask = MaskKind::causal;
  configs.push_back(c);
  const jit::CompileOptions options = testing::verbose_ptxas_options("sm_90a");
  for (const KernelConfig& config : configs) {
    SCOPED_TRACE(config.name());
    const jit::CompiledKernel compiled =
        jit::compile_kernel(config.symbol(), codegen::generate_sm90_source(config), options);
    EXPECT_FALSE(compiled.cubin.empty());
    const std::string wgmma =
        "wgmma.mma_async.sync.aligned.m64n" + std::to_string(config.block_n) + "k16";
    const std::string tma_load = config.pack_gqa ? "cp.async.bulk.tensor.5d.shared::cluster.global"
                                                 : "cp.async.bulk.tensor.4d.shared::cluster.global";
    for (const std::string& instruction : {wgmma, tma_load, std::string("mbarrier.try_wait.parity"),
                                           std::string("st.global.v2.f32")})
      EXPECT_NE(compiled.ptx.find(instruction), std::string::npos) << instruction;
    // Registers move between warpgroups only where two CTAs share an SM (hdim 64).
    EXPECT_EQ(compiled.ptx.find("setmaxnreg.inc") != std::string::npos,
              codegen::sm90_ctas_per_sm(config) == 2);
    // No TMA store of O: the partials go out from the registers.
    EXPECT_EQ(compiled.ptx.find("cp.async.bulk.tensor.4d.global.shared"), std::string::npos);
    EXPECT_EQ(compiled.ptx.find("cp.async.bulk.tensor.5d.global.shared"), std::string::npos);
    EXPECT_EQ(compiled.log.find("serialized"), std::string::npos) << compiled.log;
    const PtxasReport report = ptxas_report(compiled.log);
    EXPECT_GT(report.registers, 0) << compiled.log;
    EXPECT_EQ(report.spill_bytes, 0) << compiled.log;
    std::printf("%s: %d registers at launch, %d spill bytes\n", config.name().c_str(),
                report.registers, report.spill_bytes);
  }
}

}  // namespace
}  // namespace tilefmha
