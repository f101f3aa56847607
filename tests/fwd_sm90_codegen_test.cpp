// Codegen of the sm90_ws forward kernel with no GPU: configs of the sm90 tile table pass the
// support check and others are refused naming the field; generated sources compile with NVRTC
// for sm_90a into PTX that uses wgmma, TMA and setmaxnreg, with no spills and no serialized
// wgmma; launch shapes and TMA map specs follow the tile and the views' strides.
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
  c.dtype = c.out_dtype = DType::fp8_e4m3;
  expect_field(c, "dtype");
  c = good;
  c.hdim_q = 96;  // a problem's head dim, not a kernel's: padded kernels are whole panels
  expect_field(c, "hdim_q");
  EXPECT_THROW(codegen::generate_sm90_source(c), Error);
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

}  // namespace
// Packed GQA is derived for short query rows with a group dividing 64 and no per-head feature;
// its launch covers block_m / g positions of every KV head per tile.
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
  EXPECT_FALSE(codegen::sm90_pack_gqa_pays(c, problem(6, 2, 1).build()));    // 3 does not divide 64
  KernelConfig dropout = c;
  dropout.dropout = true;
  EXPECT_FALSE(codegen::sm90_pack_gqa_pays(dropout, problem(8, 2, 1).build()));

  KernelConfig packed = c;
  packed.pack_gqa = true;
  EXPECT_NE(packed.name().find(".packgqa-1"), std::string::npos);
  EXPECT_NE(codegen::generate_sm90_source(packed).find("/*pack_gqa=*/true"), std::string::npos);
  // 100 positions x 4 heads: tiles of 32 positions, 4 per KV head, 2 KV heads, 2 sequences.
  EXPECT_EQ(codegen::launch_shape_sm90(packed, problem(8, 2, 100).build(), 0).grid[0], 4u * 2 * 2);
  packed.dropout = true;
  EXPECT_THROW(codegen::check_supported_sm90(packed), Error);
}

}  // namespace tilefmha
