// Codegen of the Hopper backward kernel (bwd_dq_dk_dv on sm90_ws) with no GPU: the enumerated
// sm90 tiles pass the support check, unsupported fields are refused by name, the template
// table serves it ahead of sm80_mma, the launch covers every key block, the shared-memory layout
// fits, and the sources compile with NVRTC for sm_90a without spills.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "codegen/bwd_sm90.hpp"
#include "support/backward_problem.hpp"
#include "support/compile_cases.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "support/refusal.hpp"
#include "templates/template_table.hpp"

namespace tilefmha {
namespace {

using testing::CompileCase;
using testing::expect_compiles;
using testing::expect_names_field;
using testing::nvrtc_available;

using testing::backward_problem;

std::string refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_bwd_sm90(c); });
}

TEST(BwdSm90Codegen, EnumeratedTilesAreSupported) {
  for (DType dtype : {DType::fp16, DType::bf16}) {
    for (int hdim : {64, 128, 256}) {
      KernelConfig c = testing::sm90_bwd_config(dtype, hdim);
      EXPECT_EQ(refusal(c), "") << c.name();
      c.mode = Mode::group;
      c.mask = MaskKind::window;
      c.softcap = c.deterministic = true;
      EXPECT_EQ(refusal(c), "") << c.name();
      EXPECT_LE(codegen::shared_bytes_bwd_sm90(c), 232448) << c.name();
    }
  }
}

TEST(BwdSm90Codegen, UnsupportedFieldsAreNamed) {
  struct Case {
    std::string field;
    void (*change)(KernelConfig&);
  };
  const std::vector<Case> cases = {
      {"hdim_q", [](KernelConfig& c) { c.hdim_q = c.hdim_v = 192; }},
      {"hdim_q", [](KernelConfig& c) { c.hdim_q = c.hdim_v = 96; }},
      {"block_n", [](KernelConfig& c) { c.hdim_q = c.hdim_v = 256; }},  // needs 64 keys
      {"hdim_v", [](KernelConfig& c) { c.hdim_v = 64; }},
      {"pad_hdim_q", [](KernelConfig& c) { c.pad_hdim_q = true; }},
      {"dtype", [](KernelConfig& c) { c.dtype = c.out_dtype = DType::fp32; }},
      {"arch", [](KernelConfig& c) { c.arch = Arch::sm80; }},
      {"block_n", [](KernelConfig& c) { c.block_n = 64; }},
      {"block_m", [](KernelConfig& c) { c.block_m = 192; }},
      {"block_m", [](KernelConfig& c) { c.block_m = 128; }},  // hdim 128: registers
      {"warps", [](KernelConfig& c) { c.warps = 8; }},
      {"stages", [](KernelConfig& c) { c.stages = 3; }},
      {"bias", [](KernelConfig& c) { c.bias = BiasKind::alibi; }},
      {"dbias", [](KernelConfig& c) { c.dbias = true; }},
      {"dropout", [](KernelConfig& c) { c.dropout = true; }},
      {"page_table", [](KernelConfig& c) { c.page_table = PageTableKind::vllm_block_table; }},
      {"pack_gqa", [](KernelConfig& c) { c.pack_gqa = true; }},
  };
  for (const Case& test : cases) {
    KernelConfig c = testing::sm90_bwd_config(DType::bf16, 128);
    test.change(c);
    expect_names_field(refusal(c), test.field);
  }
}

// The tiles start at the window's first 1024-byte boundary; CUDA aligns the window to 16 bytes
// only. For every possible gap below the tiles, the mbarriers lie inside the allocation and clear
// of the tiles and rows, and hdim 64 and 128 have room for two dQ tiles (two dQ writers).
TEST(BwdSm90Codegen, BarriersFitBesideEveryAlignmentGap) {
  for (int hdim : {64, 128, 256}) {
    const KernelConfig c = testing::sm90_bwd_config(DType::bf16, hdim);
    const fmha::Sm90BwdSmemLayout layout = codegen::bwd_sm90_layout(c);
    EXPECT_EQ(layout.dq_buffers, hdim == 256 ? 0 : 2) << c.name();
    EXPECT_LE(layout.bytes, fmha::kSm90MaxSharedBytes) << c.name();
    const int barrier_bytes = 8 * fmha::sm90_bwd_barrier_count(c.stages);
    for (int gap = 0; gap <= fmha::kSm90BwdMaxAlignmentGap; gap += 16) {
      EXPECT_LE(gap + layout.barrier_offset, layout.bytes) << c.name() << " gap " << gap;
      const int start = fmha::sm90_bwd_barrier_position(layout, c.stages, gap);
      EXPECT_GE(start, -gap) << c.name() << " gap " << gap;
      EXPECT_LE(gap + start + barrier_bytes, layout.bytes) << c.name() << " gap " << gap;
      EXPECT_TRUE(start + barrier_bytes <= 0 || start >= layout.barrier_offset)
          << c.name() << " gap " << gap << ": the barriers overlap the tiles or rows";
    }
  }
}

TEST(BwdSm90Codegen, TemplateTableServesIt) {
  const KernelConfig c = testing::sm90_bwd_config(DType::bf16, 128);
  const templates::KernelTemplate& hopper = templates::kernel_template(c);
  EXPECT_EQ(hopper.pipeline(), Pipeline::sm90_ws);
  EXPECT_EQ(hopper.threads(c), 384);
  EXPECT_EQ(hopper.shared_bytes(c), codegen::shared_bytes_bwd_sm90(c));
}

TEST(BwdSm90Codegen, LaunchCoversEveryKeyBlock) {
  Problem p = backward_problem(3, 8, 2, 300, 257, 128);
  KernelConfig c = testing::sm90_bwd_config(DType::fp16, 128);
  c.persistent = true;
  // Fewer tiles than SMs, or an unknown SM count: one CTA per tile.
  for (int64_t sm_count : {int64_t{132}, int64_t{0}}) {
    const jit::LaunchShape shape = codegen::launch_shape_bwd_sm90(c, p, sm_count);
    EXPECT_EQ(shape.grid[0], 3u * 2u * 3u);  // ceil(257 / 128) key blocks x KV heads x sequences
    EXPECT_EQ(shape.grid[1], 1u);
    EXPECT_EQ(shape.grid[2], 1u);
    EXPECT_EQ(shape.block[0], 384u);
  }
  // More tiles than SMs: a persistent grid of at most one CTA per SM; one CTA per tile without
  // the persistent form.
  p.batch = 64;
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 132).grid[0], 131u);  // 3 key blocks divide 132
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 100).grid[0], 100u);
  c.persistent = false;
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 132).grid[0], 3u * 2u * 64u);
}

// The persistent form pays for short tiles alike within a sequence: at most 16 query-block
// visits (query blocks x the GQA group), batch mode, one key count, not deterministic.
TEST(BwdSm90Codegen, PersistentGridPaysForShortTiles) {
  Problem p = backward_problem(64, 8, 4, 512, 512, 128);
  const KernelConfig c = testing::sm90_bwd_config(DType::bf16, 128);  // 64-query blocks
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));          // 8 blocks x 2 heads
  p.nhead_k = 2;
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // x 4 heads
  p.nhead_k = 8;
  p.seqlen_q = 1024;
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // 16 blocks
  p.seqlen_q = 1025;
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  p.seqlen_q = 512;
  p.seqlen_k_per_batch.assign(64, 300);
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  p.seqlen_k_per_batch.clear();
  p.bwd.deterministic = true;
  p.nhead_k = 2;  // long tiles: deterministic runs take the staggered walk regardless
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  p.bwd.deterministic = false;
  p.mode = Mode::group;
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));
}

// Outside deterministic mode the kernel takes turns (and is the deterministic one) where they
// measured faster: unmasked, batch mode, one key count, 16 to 64 key blocks at hdim 64 and 16 to
// 32 at hdim 128.
TEST(BwdSm90Codegen, DefaultModeTakesTurnsWhereTheyPay) {
  Problem p = backward_problem(4, 16, 16, 4096, 4096, 128);  // 32 key blocks
  const KernelConfig c = testing::sm90_bwd_config(DType::bf16, 128);
  EXPECT_TRUE(codegen::bwd_sm90_takes_turns(c, p));
  p.seqlen_q = p.seqlen_k = 1024;  // 8 key blocks
  EXPECT_FALSE(codegen::bwd_sm90_takes_turns(c, p));
  p.seqlen_q = p.seqlen_k = 8192;  // 64 key blocks: hdim 64 only
  EXPECT_FALSE(codegen::bwd_sm90_takes_turns(c, p));
  EXPECT_TRUE(codegen::bwd_sm90_takes_turns(testing::sm90_bwd_config(DType::bf16, 64), p));
  p.seqlen_q = p.seqlen_k = 16384;  // 128 key blocks
  EXPECT_FALSE(codegen::bwd_sm90_takes_turns(testing::sm90_bwd_config(DType::bf16, 64), p));
  p.seqlen_q = p.seqlen_k = 2048;
  EXPECT_TRUE(codegen::bwd_sm90_takes_turns(c, p));
  KernelConfig causal = c;
  causal.mask = MaskKind::causal;
  EXPECT_FALSE(codegen::bwd_sm90_takes_turns(causal, p));
  EXPECT_FALSE(codegen::bwd_sm90_takes_turns(testing::sm90_bwd_config(DType::bf16, 256), p));
  p.seqlen_k_per_batch.assign(4, 2000);
  EXPECT_FALSE(codegen::bwd_sm90_takes_turns(c, p));
  p.seqlen_k_per_batch.clear();
  p.bwd.deterministic = true;  // deterministic mode always does
  p.seqlen_q = p.seqlen_k = 16384;
  EXPECT_TRUE(codegen::bwd_sm90_takes_turns(causal, p));
}

// Deterministic runs go persistent only unmasked, in batch mode, with at most 64 key blocks a
// head; that grid holds whole heads a wave and is launched cooperatively, so every key block of
// a head is resident while its turns are staggered.
TEST(BwdSm90Codegen, DeterministicUnmaskedRunsStaggerWholeHeads) {
  Problem p = backward_problem(16, 32, 32, 1024, 1024, 64);
  p.bwd.deterministic = true;
  KernelConfig c = testing::sm90_bwd_config(DType::bf16, 64);  // 128 keys a block
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));   // 8 key blocks
  p.seqlen_k = 64 * 128;
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // 64
  p.seqlen_k += 1;
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // 65
  p.seqlen_k = 1024;
  p.seqlen_k_per_batch.assign(16, 700);
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  p.seqlen_k_per_batch.clear();
  c.mask = MaskKind::causal;  // short tiles under a mask: mirrored pairs (below)
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  p.seqlen_q = p.seqlen_k = 4096;  // long ones: one CTA per tile
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  p.seqlen_q = p.seqlen_k = 1024;
  c.mask = MaskKind::none;

  c.deterministic = c.persistent = true;
  EXPECT_TRUE(codegen::bwd_sm90_staggered_turns(c));
  EXPECT_FALSE(codegen::bwd_sm90_mirrored_pairs(c));
  const jit::LaunchShape shape = codegen::launch_shape_bwd_sm90(c, p, 132);
  EXPECT_EQ(shape.grid[0], 128u);  // 16 heads of 8 key blocks
  EXPECT_TRUE(shape.cooperative);
  p.batch = 1;
  p.nhead_q = p.nhead_k = 3;
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 132).grid[0], 24u);  // every tile, one wave
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 0).grid[0], 8u);     // unknown: one head
  // Fewer SMs than key blocks: the round-robin grid, under the key-block count, which the kernel
  // takes as the sign to keep turns in launch order.
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 6).grid[0], 5u);
  EXPECT_TRUE(codegen::launch_shape_bwd_sm90(c, p, 6).cooperative);
  c.deterministic = false;
  EXPECT_FALSE(codegen::launch_shape_bwd_sm90(c, p, 132).cooperative);

  for (int64_t key_blocks = 1; key_blocks <= 64; ++key_blocks) {
    for (int64_t sms : {66, 114, 132}) {
      const int64_t grid = codegen::bwd_sm90_staggered_grid(key_blocks * 1000, key_blocks, sms);
      EXPECT_LE(grid, sms);
      EXPECT_GE(grid, key_blocks);
      EXPECT_EQ(grid % key_blocks, 0) << key_blocks << " key blocks, " << sms << " SMs";
    }
  }
}

// Under a mask the persistent form pays up to 64 key blocks a head (batch mode, one key count, not
// deterministic): it deals a head's key blocks in mirrored pairs, one pair a CTA where tiles are
// long and at most one CTA per SM where they are short.
TEST(BwdSm90Codegen, MaskedTilesGoInMirroredPairs) {
  Problem p = backward_problem(2, 16, 16, 8192, 8192, 128);
  KernelConfig c = testing::sm90_bwd_config(DType::bf16, 128);
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // unmasked, 128 query blocks
  c.mask = MaskKind::causal;
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  c.persistent = true;
  EXPECT_TRUE(codegen::bwd_sm90_mirrored_pairs(c));
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 132).grid[0], 32u * 16u * 2u);  // 64 blocks / 2
  p.seqlen_k = p.seqlen_q = 8192 - 128;  // 63 key blocks: 32 pairs, the last one block alone
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 132).grid[0], 32u * 16u * 2u);
  p.seqlen_k = p.seqlen_q = 8192 + 128;  // 65 key blocks: one CTA per tile balances them
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));
  p = backward_problem(64, 8, 8, 512, 512, 128);  // short tiles: pairs round-robin
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 132).grid[0], 132u);
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 0).grid[0], 2u * 8u * 64u);
  EXPECT_FALSE(codegen::launch_shape_bwd_sm90(c, p, 132).cooperative);
  c.mask = MaskKind::none;
  EXPECT_FALSE(codegen::bwd_sm90_mirrored_pairs(c));
}

// Deterministic runs under a mask take mirrored pairs where tiles are short and a head has at
// most 8 key blocks (below hdim 256), high key block first, on a cooperative grid of at most one
// CTA per SM but at least a head's pairs, so that a CTA's pairs lie in different heads.
TEST(BwdSm90Codegen, DeterministicShortMaskedTilesGoInMirroredPairs) {
  Problem p = backward_problem(64, 8, 8, 512, 512, 128);
  p.bwd.deterministic = true;
  KernelConfig c = testing::sm90_bwd_config(DType::bf16, 128);
  c.mask = MaskKind::causal;
  EXPECT_TRUE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // 8 query blocks, 4 key blocks
  p.seqlen_q = p.seqlen_k = 2048;
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // 32 query blocks
  p.seqlen_q = 512;
  p.seqlen_k = 9 * 128;
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(c, p));  // 9 key blocks
  p.seqlen_k = 512;
  KernelConfig wide = testing::sm90_bwd_config(DType::bf16, 256);  // 64 KB dQ adds
  wide.mask = MaskKind::causal;
  EXPECT_FALSE(codegen::bwd_sm90_persistent_grid_pays(wide, p));
  c.deterministic = c.persistent = true;
  EXPECT_TRUE(codegen::bwd_sm90_mirrored_pairs(c));
  EXPECT_FALSE(codegen::bwd_sm90_staggered_turns(c));
  jit::LaunchShape shape = codegen::launch_shape_bwd_sm90(c, p, 132);
  EXPECT_EQ(shape.grid[0], 132u);
  EXPECT_TRUE(shape.cooperative);
  p.batch = 1;
  p.nhead_q = p.nhead_k = 2;
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 132).grid[0], 4u);  // every pair
  p.seqlen_k = 64 * 128;  // 32 pairs a head: never fewer CTAs
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 20).grid[0], 32u);
  EXPECT_EQ(codegen::launch_shape_bwd_sm90(c, p, 0).grid[0], 32u);
}

// The persistent grid shares no factor with the key-block count, so a CTA's tiles, `grid` apart,
// go through every key block in turn.
TEST(BwdSm90Codegen, PersistentGridIsCoprimeWithTheKeyBlocks) {
  EXPECT_EQ(codegen::bwd_sm90_persistent_grid(100, 4, 132), 100);  // one wave
  EXPECT_EQ(codegen::bwd_sm90_persistent_grid(4096, 4, 132), 131);
  EXPECT_EQ(codegen::bwd_sm90_persistent_grid(4096, 1, 132), 132);
  EXPECT_EQ(codegen::bwd_sm90_persistent_grid(30030 * 2, 30030, 132), 131);
  EXPECT_EQ(codegen::bwd_sm90_persistent_grid(4096, 132, 132), 131);
  EXPECT_EQ(codegen::bwd_sm90_persistent_grid(4096, 8, 0), 4096);  // unknown SM count
  for (int64_t key_blocks = 1; key_blocks <= 300; ++key_blocks) {
    const int64_t grid = codegen::bwd_sm90_persistent_grid(100000, key_blocks, 132);
    EXPECT_LE(grid, 132);
    EXPECT_EQ(std::gcd(grid, key_blocks), 1) << key_blocks;
  }
}

TEST(BwdSm90Codegen, SourceSpellsTheConfig) {
  KernelConfig c = testing::sm90_bwd_config(DType::bf16, 64);
  c.mask = MaskKind::causal;
  c.deterministic = true;
  const std::string source = codegen::generate_bwd_sm90_source(c);
  EXPECT_NE(source.find("fmha/bwd_sm90.h"), std::string::npos);
  EXPECT_NE(source.find("/*block_m=*/128"), std::string::npos);
  EXPECT_NE(source.find("/*deterministic=*/true"), std::string::npos);
  EXPECT_NE(source.find("WindowMask"), std::string::npos);
  EXPECT_NE(source.find(c.symbol()), std::string::npos);
}

// ptxas spills a few words of the hdim-128 tile and more of the hdim-64 one (128-query
// blocks: S^T and dP^T take 128 registers beside dK and dV), more under a mask (its bounds),
// reloaded once a block; the bound catches a runaway. Featured kernels (group mode, window,
// soft cap) must compile within a loose bound.
TEST(BwdSm90Codegen, CompilesForSm90aWithinItsSpillBounds) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<CompileCase> cases;
  for (DType dtype : {DType::fp16, DType::bf16}) {
    for (int hdim : {64, 128, 256}) {
      KernelConfig c = testing::sm90_bwd_config(dtype, hdim);
      cases.push_back({c, codegen::generate_bwd_sm90_source(c), hdim == 64 ? 64 : 16});
      // Deterministic and unmasked: the staggered walk on the persistent grid. Its producer
      // roles (24 registers a thread) also compute each visit's place in the rotation: 452-532
      // bytes, in the row staging and the dQ writers.
      KernelConfig staggered = c;
      staggered.deterministic = staggered.persistent = true;
      cases.push_back({staggered, codegen::generate_bwd_sm90_source(staggered), 560});
      c.mask = MaskKind::causal;
      // The launch form of masked runs: mirrored pairs of key blocks on a persistent grid. Its
      // spills are the persistent form's (below: the producer warpgroup's tile walk), 344-356
      // bytes dealing single tiles, 368-380 in pairs.
      KernelConfig mirrored = c;
      mirrored.persistent = true;
      cases.push_back({mirrored, codegen::generate_bwd_sm90_source(mirrored), 400});
      c.deterministic = true;
      // (In the producer warpgroup. hdim 128/256: 88 bytes, 148 since the tile walk, 212 since
      // the walk starts at the first query block that may see the key block; hdim 64: 196.)
      cases.push_back({c, codegen::generate_bwd_sm90_source(c), hdim == 64 ? 208 : 224});
      // The persistent form (deterministic mirrored pairs): the producer warpgroup (24 registers
      // a thread after setmaxnreg) spills in its row staging and dQ writer, which walk the tiles;
      // off the tensor-core path. 396-428 bytes dealing single tiles, 444-476 in pairs. The
      // consumers spill at most 8 bytes (hdim 64), found by compiling without those roles.
      c.persistent = true;
      cases.push_back({c, codegen::generate_bwd_sm90_source(c), 480});
    }
  }
  for (int hdim : {64, 128, 256}) {
    KernelConfig featured = testing::sm90_bwd_config(DType::bf16, hdim);
    featured.mode = Mode::group;
    featured.mask = MaskKind::window;
    featured.softcap = true;
    cases.push_back({featured, codegen::generate_bwd_sm90_source(featured), 512});
  }
  expect_compiles(cases, "sm_90a");
}

}  // namespace
}  // namespace tilefmha
