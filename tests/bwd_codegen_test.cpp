// Codegen of the three backward kernels with no GPU: bwd_dot_do_o, bwd_dq_dk_dv on sm80_mma and
// bwd_convert_dq. Enumerated tiles pass the support checks and unsupported fields are refused by
// name; the kernel-template table serves the three families; launch shapes cover every row or
// key block; sources compile with NVRTC for sm_80 and sm_90a.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "codegen/bwd.hpp"
#include "fmha/bwd_shape.h"
#include "support/backward_problem.hpp"
#include "support/compile_cases.hpp"
#include "support/gpu_availability.hpp"
#include "support/refusal.hpp"
#include "templates/template_table.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::CompileCase;
using testing::expect_compiles;
using testing::expect_names_field;
using testing::nvrtc_available;

// The enumerated bwd_dq_dk_dv tiles of sm80_mma (data/arch/sm80.json): 8 warps, 128 keys.
KernelConfig grad_config(DType dtype, int hdim, int block_m) {
  KernelConfig c;
  c.family = Family::bwd_dq_dk_dv;
  c.pipeline = Pipeline::sm80_mma;
  c.arch = Arch::sm80;
  c.dtype = c.out_dtype = dtype;
  c.hdim_q = c.hdim_v = hdim;
  c.block_m = block_m;
  c.block_n = 128;
  c.block_k = hdim < 64 ? hdim : 64;
  c.warps = 8;
  c.stages = 2;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  return c;
}

// The enumerated tiles past 128 columns: two column parts, so 2 warps per 16 keys.
KernelConfig wide_config(DType dtype, int hdim_q, int hdim_v, int block_m, int block_n) {
  KernelConfig c = grad_config(dtype, hdim_q, block_m);
  c.hdim_v = hdim_v;
  c.block_n = block_n;
  c.warps = 2 * block_n / 16;
  c.stages = 1;
  return c;
}

KernelConfig row_config(Family family, DType dtype, int hdim) {
  KernelConfig c;
  c.family = family;
  c.pipeline = family == Family::bwd_dot_do_o ? Pipeline::bwd_dot_do_o : Pipeline::bwd_convert_dq;
  c.arch = Arch::sm80;
  c.dtype = c.out_dtype = dtype;
  c.hdim_q = c.hdim_v = hdim;
  c.block_m = 64;
  c.block_n = 0;
  c.block_k = hdim;
  c.warps = 4;
  c.stages = 1;
  return c;
}

std::string grad_refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_bwd_sm80(c); });
}

std::string row_refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_bwd_rows(c); });
}

using testing::backward_problem;

TEST(BwdCodegen, EnumeratedTilesAreSupported) {
  for (DType dtype : {DType::fp16, DType::bf16}) {
    for (auto [hdim, block_m] : {std::pair{32, 128}, {64, 128}, {96, 64}, {128, 64}}) {
      KernelConfig c = grad_config(dtype, hdim, block_m);
      EXPECT_EQ(grad_refusal(c), "") << c.name();
      c.mode = Mode::group;
      c.mask = MaskKind::window;
      c.softcap = c.deterministic = true;
      EXPECT_EQ(grad_refusal(c), "") << c.name();
      // Every forward feature with its gradient.
      c.bias = BiasKind::alibi;
      c.dropout = true;
      EXPECT_EQ(grad_refusal(c), "") << c.name();
      c.bias = BiasKind::elementwise;
      c.dbias = true;
      EXPECT_EQ(grad_refusal(c), "") << c.name();
    }
    // sm80/sm90 (64 x 64) and sm86/sm89 (32 x 64, 32 x 32) tiles of the wide head dims.
    for (auto [hq, hv, block_m, block_n] : {std::tuple{160, 160, 64, 64},
                                            {192, 128, 64, 64},
                                            {192, 192, 64, 64},
                                            {256, 256, 64, 64},
                                            {192, 192, 32, 64},
                                            {256, 256, 32, 32}}) {
      KernelConfig c = wide_config(dtype, hq, hv, block_m, block_n);
      EXPECT_EQ(grad_refusal(c), "") << c.name();
      c.mode = Mode::group;
      c.mask = MaskKind::causal;
      c.deterministic = true;
      EXPECT_EQ(grad_refusal(c), "") << c.name();
    }
    for (int hdim : {32, 64, 128, 256}) {
      EXPECT_EQ(row_refusal(row_config(Family::bwd_dot_do_o, dtype, hdim)), "");
      KernelConfig convert = row_config(Family::bwd_convert_dq, dtype, hdim);
      convert.deterministic = true;
      EXPECT_EQ(row_refusal(convert), "");
    }
  }
}

TEST(BwdCodegen, UnsupportedFieldsAreNamed) {
  struct Case {
    std::string field;
    void (*change)(KernelConfig&);
  };
  const std::vector<Case> grad_cases = {
      {"hdim_q", [](KernelConfig& c) { c.hdim_q = c.hdim_v = 264; }},
      {"hdim_q", [](KernelConfig& c) { c.hdim_q = 12; }},
      {"hdim_v", [](KernelConfig& c) { c.hdim_v = 320; }},
      // Past 128 columns a CTA needs two warps per 16 keys: 128 keys on 8 warps is one.
      {"block_n", [](KernelConfig& c) { c.hdim_q = c.hdim_v = 256; }},
      {"block_n", [](KernelConfig& c) { c.hdim_q = 192; }},
      {"dtype", [](KernelConfig& c) { c.dtype = c.out_dtype = DType::fp32; }},
      {"block_n", [](KernelConfig& c) { c.block_n = 64; }},
      {"block_m", [](KernelConfig& c) { c.block_m = 48; }},
      {"stages", [](KernelConfig& c) { c.stages = 3; }},
      {"dbias", [](KernelConfig& c) { c.dbias = true; }},  // without an elementwise bias
      {"dbias",
       [](KernelConfig& c) {
         c.bias = BiasKind::alibi;
         c.dbias = true;
       }},
      {"page_table", [](KernelConfig& c) { c.page_table = PageTableKind::vllm_block_table; }},
      {"fp8_scale", [](KernelConfig& c) { c.fp8_scale = Fp8ScaleKind::per_tensor; }},
      {"persistent", [](KernelConfig& c) { c.persistent = true; }},
  };
  for (const Case& test : grad_cases) {
    KernelConfig c = grad_config(DType::bf16, 128, 64);
    test.change(c);
    expect_names_field(grad_refusal(c), test.field);
  }
  const std::vector<Case> row_cases = {
      {"dtype", [](KernelConfig& c) { c.dtype = c.out_dtype = DType::fp32; }},
      {"hdim_v", [](KernelConfig& c) { c.hdim_v = 12; }},
      {"mask", [](KernelConfig& c) { c.mask = MaskKind::causal; }},
      {"deterministic", [](KernelConfig& c) { c.deterministic = true; }},
      {"pipeline", [](KernelConfig& c) { c.pipeline = Pipeline::bwd_convert_dq; }},
  };
  for (const Case& test : row_cases) {
    KernelConfig c = row_config(Family::bwd_dot_do_o, DType::fp16, 64);
    test.change(c);
    expect_names_field(row_refusal(c), test.field);
  }
}

TEST(BwdCodegen, TemplateTableServesTheThreeStages) {
  const KernelConfig configs[] = {row_config(Family::bwd_dot_do_o, DType::bf16, 128),
                                  grad_config(DType::bf16, 128, 64),
                                  row_config(Family::bwd_convert_dq, DType::bf16, 128)};
  for (const KernelConfig& c : configs) {
    EXPECT_FALSE(templates::build_rejection(c).has_value()) << c.name();
    const templates::KernelTemplate& t = templates::kernel_template(c);
    EXPECT_EQ(t.family(), c.family);
    EXPECT_EQ(t.threads(c), c.warps * 32);
  }
  EXPECT_EQ(templates::kernel_template(configs[1]).shared_bytes(configs[1]),
            fmha::bwd_sm80_shared_bytes(128, 128, 64, 128, 2));
  // An unsupported trait is a typed rejection naming the field, for the dispatcher's report.
  KernelConfig persistent = grad_config(DType::fp16, 64, 128);
  persistent.persistent = true;
  const auto rejection = templates::build_rejection(persistent);
  ASSERT_TRUE(rejection.has_value());
  EXPECT_EQ(rejection->field, "persistent");
  // Problem features the kernels lack are refused per problem too: a broadcast dBias is summed
  // with fp32 atomics, so a bf16 one is refused (and a deterministic fp32 one).
  Problem biased = backward_problem(2, 2, 2, 64, 64, 64);
  biased.bias_kind = BiasKind::elementwise;
  biased.bwd.dbias = contiguous_view(reinterpret_cast<void*>(uintptr_t{1} << 20), DType::bf16,
                                     {1, 2, 64, 64}, MemorySpace::device);
  biased.bwd.dbias.shape[0] = 2;
  biased.bwd.dbias.stride[0] = 0;
  KernelConfig with_dbias = configs[1];
  with_dbias.bias = BiasKind::elementwise;
  with_dbias.dbias = true;
  const templates::KernelTemplate& grad = templates::kernel_template(with_dbias);
  auto refused = grad.can_implement(with_dbias, biased);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->field, "bwd.dbias");
  EXPECT_NE(refused->text.find("fp32"), std::string::npos) << refused->text;
  biased.bwd.dbias.dtype = DType::fp32;
  EXPECT_FALSE(grad.can_implement(with_dbias, biased).has_value());
  biased.bwd.deterministic = true;
  refused = grad.can_implement(with_dbias, biased);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->field, "bwd.dbias");
  // Not broadcast: one store per element, in any float dtype, deterministic too.
  biased.bwd.dbias = contiguous_view(reinterpret_cast<void*>(uintptr_t{1} << 20), DType::bf16,
                                     {2, 2, 64, 64}, MemorySpace::device);
  EXPECT_FALSE(grad.can_implement(with_dbias, biased).has_value());
  Problem no_dq = backward_problem(1, 2, 2, 64, 64, 128);
  const auto convert_refused =
      templates::kernel_template(configs[2]).can_implement(configs[2], no_dq);
  ASSERT_TRUE(convert_refused.has_value());
  EXPECT_EQ(convert_refused->field, "bwd.dq");
}

TEST(BwdCodegen, SourceSpellsTheConfig) {
  KernelConfig c = grad_config(DType::fp16, 64, 128);
  c.mask = MaskKind::causal;
  c.softcap = true;
  const std::string source = codegen::generate_bwd_sm80_source(c);
  EXPECT_NE(source.find("#include \"fmha/bwd_sm80.h\""), std::string::npos);
  EXPECT_NE(source.find("tilefmha::tile::half_t"), std::string::npos);
  EXPECT_NE(source.find("WindowMask"), std::string::npos);
  EXPECT_NE(source.find("/*softcap=*/true, /*deterministic=*/false"), std::string::npos);
  EXPECT_NE(source.find(c.symbol()), std::string::npos);
  EXPECT_NE(source.find("fmha::NoBias,\n    tilefmha::fmha::BwdNoDropout,\n"
                        "    tilefmha::fmha::NoDBias>"),
            std::string::npos)
      << source;
  c.bias = BiasKind::elementwise;
  c.dbias = c.dropout = true;
  const std::string featured = codegen::generate_bwd_sm80_source(c);
  EXPECT_NE(featured.find("fmha::BwdElementwiseBias,\n    tilefmha::fmha::BwdPhiloxDropout,\n"
                          "    tilefmha::fmha::BwdDBias>"),
            std::string::npos)
      << featured;
  c.bias = BiasKind::alibi;
  c.dbias = false;
  EXPECT_NE(codegen::generate_bwd_sm80_source(c).find("fmha::AlibiBias"), std::string::npos);
  const std::string dot =
      codegen::generate_bwd_rows_source(row_config(Family::bwd_dot_do_o, DType::bf16, 64));
  EXPECT_NE(dot.find("bwd_dot_do_o<Traits>"), std::string::npos);
  EXPECT_NE(dot.find("bfloat16_t"), std::string::npos);
  const std::string convert =
      codegen::generate_bwd_rows_source(row_config(Family::bwd_convert_dq, DType::fp16, 64));
  EXPECT_NE(convert.find("bwd_convert_dq<Traits>"), std::string::npos);
}

TEST(BwdCodegen, LaunchShapesCoverRowsAndKeyBlocks) {
  const Problem p = backward_problem(3, 8, 2, 77, 130, 64);
  const KernelConfig grad = grad_config(DType::bf16, 64, 128);
  const jit::LaunchShape shape = codegen::launch_shape_bwd_sm80(grad, p);
  EXPECT_EQ(shape.grid[0], 2u);  // ceil(130 / 128) key blocks
  EXPECT_EQ(shape.grid[1], 2u);  // KV heads: a CTA loops over the group's query heads
  EXPECT_EQ(shape.grid[2], 3u);
  EXPECT_EQ(shape.block[0], 256u);
  EXPECT_EQ(shape.dynamic_shared_bytes,
            static_cast<unsigned>(fmha::bwd_sm80_shared_bytes(64, 64, 128, 128, 2)));
  EXPECT_EQ(codegen::bwd_key_blocks(grad, p), 2);

  const KernelConfig dot = row_config(Family::bwd_dot_do_o, DType::bf16, 64);
  const jit::LaunchShape rows = codegen::launch_shape_bwd_rows(dot, p);
  EXPECT_EQ(codegen::bwd_rows(p), 3 * 77 * 8);
  EXPECT_EQ(rows.grid[0], static_cast<unsigned>((3 * 77 * 8 + 63) / 64));
  EXPECT_EQ(rows.block[0], 128u);
  EXPECT_EQ(rows.dynamic_shared_bytes, 0u);

  // Group mode: a plan serves every packing of its key (batch 3, longest 77), so its rows are
  // the most such a problem can hold, not this packing's 40 tokens.
  Problem group = p;
  group.mode = Mode::group;
  group.seqstart_q = {0, 10, 10, 40};
  EXPECT_EQ(codegen::bwd_rows(group), 3 * 77 * 8);
}

TEST(BwdCodegen, CompilesForSm80AndSm90a) {
  if (!nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<CompileCase> cases;
  for (DType dtype : {DType::fp16, DType::bf16}) {
    for (auto [hdim, block_m] : {std::pair{64, 128}, {128, 64}}) {
      KernelConfig c = grad_config(dtype, hdim, block_m);
      cases.push_back({c, codegen::generate_bwd_sm80_source(c)});
    }
    for (Family family : {Family::bwd_dot_do_o, Family::bwd_convert_dq}) {
      const KernelConfig c = row_config(family, dtype, 128);
      cases.push_back({c, codegen::generate_bwd_rows_source(c)});
    }
  }
  // The sm86/sm89 tile of hdim 128 (99 KiB of shared memory): 64 keys on 4 warps.
  KernelConfig narrow = grad_config(DType::fp16, 128, 64);
  narrow.block_n = 64;
  narrow.warps = 4;
  narrow.stages = 1;
  narrow.mask = MaskKind::causal;
  cases.push_back({narrow, codegen::generate_bwd_sm80_source(narrow)});
  // Every hook of the gradient kernel: group mode, window mask, soft cap, deterministic dQ, a
  // padded head dim.
  KernelConfig featured = grad_config(DType::bf16, 96, 64);
  featured.mode = Mode::group;
  featured.mask = MaskKind::window;
  featured.softcap = featured.deterministic = true;
  featured.pad_hdim_q = featured.pad_hdim_v = true;
  cases.push_back({featured, codegen::generate_bwd_sm80_source(featured)});
  // The column-split kernels (no register spills allowed, as for every case).
  KernelConfig wide = wide_config(DType::bf16, 256, 256, 64, 64);
  wide.mask = MaskKind::causal;
  cases.push_back({wide, codegen::generate_bwd_sm80_source(wide)});
  KernelConfig wide_narrow = wide_config(DType::fp16, 256, 256, 32, 32);
  cases.push_back({wide_narrow, codegen::generate_bwd_sm80_source(wide_narrow)});
  KernelConfig mixed = wide_config(DType::fp16, 192, 128, 64, 64);
  mixed.mode = Mode::group;
  mixed.deterministic = true;
  cases.push_back({mixed, codegen::generate_bwd_sm80_source(mixed)});
  KernelConfig odd = wide_config(DType::bf16, 160, 160, 64, 64);
  odd.mask = MaskKind::window;
  odd.softcap = true;
  cases.push_back({odd, codegen::generate_bwd_sm80_source(odd)});
  // The forward's features with their gradients: ALiBi, and an elementwise bias with dBias, each
  // with dropout, on the register-heaviest tiles (hdim 128, and 256 split).
  for (const KernelConfig& base : {grad_config(DType::bf16, 128, 64), narrow, wide}) {
    KernelConfig alibi = base;
    alibi.bias = BiasKind::alibi;
    alibi.dropout = true;
    cases.push_back({alibi, codegen::generate_bwd_sm80_source(alibi)});
    KernelConfig biased = base;
    biased.bias = BiasKind::elementwise;
    biased.dbias = biased.dropout = biased.softcap = true;
    biased.mode = Mode::group;
    cases.push_back({biased, codegen::generate_bwd_sm80_source(biased)});
  }
  KernelConfig convert = row_config(Family::bwd_convert_dq, DType::fp16, 64);
  convert.deterministic = convert.pad_hdim_q = true;
  cases.push_back({convert, codegen::generate_bwd_rows_source(convert)});
  expect_compiles(cases, "sm_80");
  expect_compiles(cases, "sm_90a");
}

}  // namespace
}  // namespace tilefmha
