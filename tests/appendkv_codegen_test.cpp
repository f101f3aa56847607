// The append-KV kernel with no GPU: enumerated fwd_appendkv configs pass the support check
// (fp8 ones with per_tensor scales, or per_page ones over a paged cache, on sm89 / sm90; others
// are refused naming the field), the
// template table serves the family, sources select the element type, paged path and RoPE kind,
// every variant compiles with NVRTC for sm_80 and sm_90a without spills (fp8 ones for sm_89 and
// sm_90a, and not for sm_80), the launch covers K, V and Q rows, and an append -> attend problem
// is planned as the append kernel then the attention's kernels (an fp8 one on sm90_ws's fp8
// kernel), with the key counts and the attention's workspace nested in one workspace.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codegen/appendkv.hpp"
#include "enumerate/arch_spec.hpp"
#include "enumerate/enumerator.hpp"
#include "enumerate/profile.hpp"
#include "enumerate/sweep_config.hpp"
#include "fmha/appendkv_params.h"
#include "jit/compiler.hpp"
#include "runtime/candidates.hpp"
#include "runtime/dispatcher.hpp"
#include "runtime/plan_key.hpp"
#include "runtime/stage_runner.hpp"
#include "support/compile_cases.hpp"
#include "support/gpu_availability.hpp"
#include "support/refusal.hpp"
#include "templates/template_table.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {
namespace {

// fp8 configs are sm90's (their conversions need sm_89) with per-tensor scales.
KernelConfig appendkv_config(DType dtype, int hdim_q, int hdim_v, PageTableKind table,
                             RopeKind rope) {
  KernelConfig c;
  c.family = Family::fwd_appendkv;
  c.pipeline = Pipeline::appendkv;
  c.arch = is_fp8(dtype) ? Arch::sm90 : Arch::sm80;
  c.fp8_scale = is_fp8(dtype) ? Fp8ScaleKind::per_tensor : Fp8ScaleKind::none;
  c.dtype = c.out_dtype = dtype;
  c.hdim_q = hdim_q;
  c.hdim_v = hdim_v;
  c.block_m = c.block_n = 64;
  c.block_k = hdim_q;
  c.warps = 4;
  c.stages = 1;
  c.pad_seqlen_q = c.pad_seqlen_k = c.pad_hdim_q = c.pad_hdim_v = true;
  c.page_table = table;
  c.rope = rope;
  return c;
}

std::string refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_appendkv(c); });
}

// Every enumerated config builds (fp8 ones with per-tensor scales, or per-page ones over a paged
// cache: the quantizing append), and anything else is refused naming fp8_scale; fp8 configs exist
// for sm89 and sm90 only.
TEST(AppendKvCodegen, EnumeratedConfigsBuildExceptFp8ScalesTheyCannotKeep) {
  for (Arch arch : {Arch::sm80, Arch::sm89, Arch::sm90}) {
    SCOPED_TRACE(to_string(arch));
    const auto configs =
        enumerate::enumerate_kernels(enumerate::load_arch_spec(arch),
                                     enumerate::load_sweep_config("appendkv"),
                                     enumerate::load_profile("full"), enumerate::FilterSet{})
            .configs;
    ASSERT_FALSE(configs.empty());
    int64_t built = 0, fp8_built = 0;
    for (const KernelConfig& c : configs) {
      const auto rejection = templates::build_rejection(c);
      const bool per_page_over_pages =
          c.fp8_scale == Fp8ScaleKind::per_page && c.page_table != PageTableKind::none;
      if (is_fp8(c.dtype) && c.fp8_scale != Fp8ScaleKind::per_tensor && !per_page_over_pages) {
        ASSERT_TRUE(rejection.has_value()) << c.name();
        EXPECT_EQ(rejection->field, "fp8_scale") << rejection->text;
        continue;
      }
      ASSERT_FALSE(rejection.has_value()) << c.name() << ": " << rejection->text;
      ++built;
      fp8_built += is_fp8(c.dtype);
    }
    EXPECT_GT(built, 0);
    if (arch == Arch::sm80) {
      EXPECT_EQ(fp8_built, 0);
    } else {
      EXPECT_GT(fp8_built, 0);
    }
  }
}

TEST(AppendKvCodegen, SupportChecksNameTheField) {
  const KernelConfig good =
      appendkv_config(DType::bf16, 128, 128, PageTableKind::none, RopeKind::none);
  EXPECT_EQ(refusal(good), "");
  KernelConfig c = good;
  c.dtype = c.out_dtype = DType::int32;
  testing::expect_names_field(refusal(c), "dtype");
  c = good;
  c.fp8_scale = Fp8ScaleKind::per_tensor;
  testing::expect_names_field(refusal(c), "fp8_scale");
  c = good;
  c.mode = Mode::group;
  testing::expect_names_field(refusal(c), "mode");
  c = good;
  c.mask = MaskKind::causal;
  testing::expect_names_field(refusal(c), "mask");
  c = good;
  c.hdim_v = 512;
  testing::expect_names_field(refusal(c), "hdim_v");
  c = good;
  c.family = Family::fwd;
  testing::expect_names_field(refusal(c), "family");
}

TEST(AppendKvCodegen, Fp8NeedsPerTensorScalesAndSm89) {
  const KernelConfig good = appendkv_config(
      DType::fp8_e4m3, 128, 128, PageTableKind::vllm_block_table, RopeKind::half_rotated);
  EXPECT_EQ(refusal(good), "");
  KernelConfig c = good;
  c.arch = Arch::sm89;
  EXPECT_EQ(refusal(c), "");
  c.dtype = c.out_dtype = DType::fp8_e5m2;
  EXPECT_EQ(refusal(c), "");
  for (Fp8ScaleKind kind : {Fp8ScaleKind::none, Fp8ScaleKind::per_block}) {
    c = good;
    c.fp8_scale = kind;
    const std::string why = refusal(c);
    testing::expect_names_field(why, "fp8_scale");
    if (kind != Fp8ScaleKind::none) {
      EXPECT_NE(why.find("per_tensor"), std::string::npos) << why;
    }
  }
  // Per-page scales: the quantizing append, over a paged cache only.
  c = good;
  c.fp8_scale = Fp8ScaleKind::per_page;
  EXPECT_EQ(refusal(c), "");
  EXPECT_NE(codegen::generate_appendkv_source(c).find("/*quantize=*/true"), std::string::npos);
  c.page_table = PageTableKind::none;
  testing::expect_names_field(refusal(c), "fp8_scale");
  for (Arch arch : {Arch::sm80, Arch::sm86}) {
    c = good;
    c.arch = arch;
    testing::expect_names_field(refusal(c), "arch");
  }
  c = good;
  c.out_dtype = DType::bf16;  // the cache keeps its codes; O's dtype is the attention's
  testing::expect_names_field(refusal(c), "out_dtype");
}

TEST(AppendKvCodegen, SourcesSelectPagingAndRope) {
  const std::string paged = codegen::generate_appendkv_source(appendkv_config(
      DType::fp16, 192, 128, PageTableKind::sglang_page_list, RopeKind::half_rotated));
  EXPECT_NE(paged.find("tilefmha::fmha::AppendKvTraits<\n    tilefmha::tile::half_t"),
            std::string::npos)
      << paged;
  EXPECT_NE(paged.find("/*hdim=*/192"), std::string::npos) << paged;
  EXPECT_NE(paged.find("/*paged=*/true, tilefmha::fmha::RopeMode::half_rotated"), std::string::npos)
      << paged;
  const std::string contiguous = codegen::generate_appendkv_source(
      appendkv_config(DType::fp32, 64, 64, PageTableKind::none, RopeKind::interleaved));
  EXPECT_NE(contiguous.find("/*paged=*/false, tilefmha::fmha::RopeMode::interleaved"),
            std::string::npos)
      << contiguous;
  for (const auto& [dtype, type] : {std::pair{DType::fp8_e4m3, "tilefmha::tile::float_e4m3_t"},
                                    std::pair{DType::fp8_e5m2, "tilefmha::tile::float_e5m2_t"}}) {
    const std::string fp8 = codegen::generate_appendkv_source(
        appendkv_config(dtype, 128, 128, PageTableKind::none, RopeKind::half_rotated));
    EXPECT_NE(fp8.find(std::string("AppendKvTraits<\n    ") + type + ", /*hdim=*/128"),
              std::string::npos)
        << fp8;
  }
}

std::vector<testing::CompileCase> compile_cases() {
  std::vector<testing::CompileCase> cases;
  for (const KernelConfig& c :
       {appendkv_config(DType::bf16, 128, 128, PageTableKind::vllm_block_table,
                        RopeKind::half_rotated),
        appendkv_config(DType::fp16, 64, 64, PageTableKind::sglang_page_list,
                        RopeKind::interleaved),
        appendkv_config(DType::fp16, 256, 256, PageTableKind::none, RopeKind::half_rotated),
        appendkv_config(DType::fp32, 256, 256, PageTableKind::none, RopeKind::interleaved),
        appendkv_config(DType::fp32, 32, 32, PageTableKind::vllm_block_table, RopeKind::none),
        appendkv_config(DType::bf16, 192, 128, PageTableKind::none, RopeKind::none)})
    cases.push_back({c, codegen::generate_appendkv_source(c)});
  return cases;
}

// fp8: RoPE of both kinds over contiguous and paged caches (both table forms), and the plain
// copy; hdim 256 has the most chunks per row (16 lanes of 16 codes); and the quantizing append.
std::vector<testing::CompileCase> fp8_compile_cases() {
  std::vector<testing::CompileCase> cases;
  for (const KernelConfig& c :
       {appendkv_config(DType::fp8_e4m3, 128, 128, PageTableKind::none, RopeKind::half_rotated),
        appendkv_config(DType::fp8_e4m3, 128, 128, PageTableKind::vllm_block_table,
                        RopeKind::half_rotated),
        appendkv_config(DType::fp8_e5m2, 256, 256, PageTableKind::sglang_page_list,
                        RopeKind::interleaved),
        appendkv_config(DType::fp8_e5m2, 64, 64, PageTableKind::none, RopeKind::none)})
    cases.push_back({c, codegen::generate_appendkv_source(c)});
  // The quantizing append (per-page scales): its rotating kernels hold two rows in flight.
  for (KernelConfig c : {appendkv_config(DType::fp8_e4m3, 128, 128, PageTableKind::vllm_block_table,
                                         RopeKind::half_rotated),
                         appendkv_config(DType::fp8_e5m2, 256, 256, PageTableKind::sglang_page_list,
                                         RopeKind::interleaved),
                         appendkv_config(DType::fp8_e4m3, 64, 64, PageTableKind::sglang_page_list,
                                         RopeKind::none)}) {
    c.fp8_scale = Fp8ScaleKind::per_page;
    cases.push_back({c, codegen::generate_appendkv_source(c)});
  }
  return cases;
}

TEST(AppendKvCodegen, CompilesForSm80) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  testing::expect_compiles(compile_cases(), "sm_80");
}

TEST(AppendKvCodegen, CompilesForSm90a) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<testing::CompileCase> cases = compile_cases();
  for (testing::CompileCase& c : fp8_compile_cases()) cases.push_back(std::move(c));
  testing::expect_compiles(cases, "sm_90a");
}

TEST(AppendKvCodegen, Fp8CompilesForSm89) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<testing::CompileCase> cases = fp8_compile_cases();
  for (testing::CompileCase& c : cases) c.config.arch = Arch::sm89;
  testing::expect_compiles(cases, "sm_89");
}

// Below sm_89 the kernel itself refuses fp8 (codegen refuses the config before that).
TEST(AppendKvCodegen, Fp8DoesNotCompileForSm80) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  const testing::CompileCase c = fp8_compile_cases().front();
  jit::CompileOptions options;
  options.arch = "sm_80";
  try {
    jit::compile_kernel(c.config.symbol(), c.source, options);
    ADD_FAILURE() << "compiled for sm_80";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("fp8 append-KV needs sm_89"), std::string::npos)
        << error.what();
  }
}

// A decode append over a vLLM block table: 3 sequences, 8 query heads on 2 KV heads, 1 new token
// each, pages of 16. Planning reads shapes and traits only, so the views point nowhere. fp8
// dtypes get fp8 scales of `kind` (per-tensor by default) and a bf16 O.
Problem paged_append(bool with_output, bool rotate_q, DType dtype = DType::bf16,
                     Fp8ScaleKind kind = Fp8ScaleKind::per_tensor) {
  const auto fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  PagedKv paged;
  paged.table = PageTableKind::vllm_block_table;
  paged.page_size = 16;
  paged.num_pages = 12;
  paged.max_pages_per_seq = 4;
  paged.block_table = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  AppendKv append;
  append.seqlen_knew = 1;
  append.k_new = bshd(fake, dtype, 3, 1, 2, 128, MemorySpace::device);
  append.v_new = append.k_new;
  append.rope = RopeKind::half_rotated;
  append.rotary_dim = 64;
  append.rope_theta = 10000.0;
  append.rotate_q = rotate_q;
  ProblemBuilder builder(Family::fwd_appendkv);
  builder.dtype(dtype).shape(3, 8, 2, 1, 0, 128, 128).key_lengths({40, 0, 63});
  builder.paged(paged).append(append);
  builder.q(bshd(fake, dtype, 3, 1, 8, 128, MemorySpace::device));
  if (with_output)
    builder.o(bshd(fake, builder.peek().out_dtype, 3, 1, 8, 128, MemorySpace::device));
  const TensorView pool = bshd(fake, dtype, 12, 16, 2, 128, MemorySpace::device);
  builder.k(pool).v(pool);
  if (is_fp8(dtype)) {
    Fp8Scales scales;
    scales.kind = kind;
    scales.q_descale = 0.5;
    scales.k_descale = 0.25;
    scales.v_descale = 2.0;
    builder.fp8_scales(scales);
  }
  return builder.build();
}

TEST(AppendKvDispatch, LaunchCoversKeyValueAndQueryRows) {
  const KernelConfig c = appendkv_config(DType::bf16, 128, 128, PageTableKind::vllm_block_table,
                                         RopeKind::half_rotated);
  // bf16 hdim 128: 16 chunks of 16 bytes, 16 lanes a group, 8 groups per 128-thread CTA; a group
  // moves a token's 2 KV heads (or its 8 query heads) as one run.
  const Problem keys_only = paged_append(false, false);
  EXPECT_EQ(codegen::appendkv_rows(keys_only), 2 * 3 * 1 * 2);
  EXPECT_EQ(codegen::appendkv_runs(keys_only).groups(), 2 * 3);
  EXPECT_EQ(codegen::launch_shape_appendkv(c, keys_only).grid[0], 1u);
  const Problem with_q = paged_append(false, true);
  EXPECT_EQ(codegen::appendkv_rows(with_q), 2 * 3 * 1 * 2 + 3 * 1 * 8);
  EXPECT_EQ(codegen::appendkv_runs(with_q).groups(), 2 * 3 + 3);
  EXPECT_EQ(codegen::launch_shape_appendkv(c, with_q).grid[0], 2u);
  EXPECT_EQ(codegen::launch_shape_appendkv(c, with_q).block[0], 128u);
  // The kernel's registers hold runs of its own RoPE kind only.
  KernelConfig plain = c;
  plain.rope = RopeKind::none;
  testing::expect_names_field(
      testing::not_supported_message([&] { codegen::launch_shape_appendkv(plain, with_q); }),
      "rope");
}

// A token's heads split into runs of at most kAppendKvRunHeads, as even as that allows, with or
// without RoPE; Q has no groups unless it rotates.
TEST(AppendKvDispatch, HeadRunsAreEvenAndCapped) {
  Problem p = paged_append(false, true);
  const auto runs_for = [&](int64_t heads_k, int64_t heads_q) {
    p.nhead_k = heads_k;
    p.nhead_q = heads_q;
    return codegen::appendkv_runs(p);
  };
  ASSERT_EQ(fmha::kAppendKvRunHeads, 8);
  for (const auto& [heads, run, runs] :
       {std::tuple{1, 1, 1}, std::tuple{2, 2, 1}, std::tuple{8, 8, 1}, std::tuple{9, 5, 2},
        std::tuple{12, 6, 2}, std::tuple{22, 8, 3}, std::tuple{32, 8, 4}, std::tuple{40, 8, 5},
        std::tuple{64, 8, 8}}) {
    SCOPED_TRACE(heads);
    const codegen::AppendKvRuns r = runs_for(heads, heads);
    EXPECT_EQ(r.k_run, run);
    EXPECT_EQ(r.q_run, run);
    EXPECT_EQ(r.k_groups, 3 * runs);  // 3 sequences, 1 new token each
    EXPECT_EQ(r.q_groups, 3 * runs);
    EXPECT_GE(run * runs, heads);
    EXPECT_LT(run * (runs - 1), heads) << "no empty run";
  }
  const codegen::AppendKvRuns gqa = runs_for(8, 32);
  EXPECT_EQ(gqa.groups(), 2 * 3 + 3 * 4);
  p.append.rotate_q = false;
  EXPECT_EQ(runs_for(8, 32).q_groups, 0);
  p.append.rope = RopeKind::none;
  // A plain copy moves runs too: a run's loads go out together and its page lookup is shared.
  const codegen::AppendKvRuns copy = runs_for(12, 32);
  EXPECT_EQ(copy.k_run, 6);
  EXPECT_EQ(copy.k_groups, 3 * 2);
  EXPECT_EQ(copy.q_groups, 0);
}

runtime::Dispatcher dispatcher_for(runtime::Registry& registry) {
  runtime::DispatcherOptions options;
  options.candidates = runtime::default_candidates(
      Arch::sm90, {Family::fwd_appendkv, Family::fwd_pagedkv, Family::fwd, Family::fwd_splitkv,
                   Family::fwd_splitkv_combine});
  return runtime::Dispatcher(registry, {Arch::sm90, 132, "test"}, options);
}

TEST(AppendKvDispatch, AppendThenAttendExplainsBothStages) {
  runtime::Registry registry;
  runtime::Dispatcher dispatcher = dispatcher_for(registry);
  const auto verdicts = dispatcher.explain(paged_append(true, true));
  ASSERT_FALSE(verdicts.empty());
  const auto best_of = [&](Family family) -> const runtime::CandidateVerdict* {
    for (const auto& verdict : verdicts)
      if (verdict.kernel.family == family && verdict.rejection.empty()) return &verdict;
    return nullptr;
  };
  const auto* append = best_of(Family::fwd_appendkv);
  ASSERT_NE(append, nullptr);
  EXPECT_EQ(append->kernel.page_table, PageTableKind::vllm_block_table);
  EXPECT_EQ(append->kernel.rope, RopeKind::half_rotated);
  const auto* attend = best_of(Family::fwd_pagedkv);
  ASSERT_NE(attend, nullptr) << "the attention over the paged cache has a kernel";
  // Append only: no attention verdicts.
  for (const auto& verdict : dispatcher.explain(paged_append(false, true)))
    EXPECT_EQ(verdict.kernel.family, Family::fwd_appendkv) << verdict.kernel.name();
}

// The first verdict of `family` that fits, or null.
const runtime::CandidateVerdict* best_of(const std::vector<runtime::CandidateVerdict>& verdicts,
                                         Family family) {
  for (const auto& verdict : verdicts)
    if (verdict.kernel.family == family && verdict.rejection.empty()) return &verdict;
  return nullptr;
}

// An fp8 append -> attend: the append kernel moves the codes (its out_dtype is the cache's), the
// attention runs on sm90_ws's fp8 kernel with the problem's scales and a bf16 O.
TEST(AppendKvDispatch, Fp8AppendThenAttendPlansTheSm90Fp8Attention) {
  runtime::Registry registry;
  runtime::Dispatcher dispatcher = dispatcher_for(registry);
  for (DType dtype : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    SCOPED_TRACE(to_string(dtype));
    const Problem problem = paged_append(true, true, dtype);
    ASSERT_EQ(problem.out_dtype, DType::bf16);
    const auto verdicts = dispatcher.explain(problem);
    const auto* append = best_of(verdicts, Family::fwd_appendkv);
    ASSERT_NE(append, nullptr);
    EXPECT_EQ(append->kernel.dtype, dtype);
    EXPECT_EQ(append->kernel.out_dtype, dtype);
    EXPECT_EQ(append->kernel.fp8_scale, Fp8ScaleKind::per_tensor);
    EXPECT_EQ(append->kernel.arch, Arch::sm90);
    const auto* attend = best_of(verdicts, Family::fwd_pagedkv);
    ASSERT_NE(attend, nullptr) << "an fp8 paged attention kernel";
    EXPECT_EQ(attend->kernel.pipeline, Pipeline::sm90_ws) << attend->kernel.name();
    EXPECT_EQ(attend->kernel.dtype, dtype);
    EXPECT_EQ(attend->kernel.out_dtype, DType::bf16);
    EXPECT_EQ(attend->kernel.fp8_scale, Fp8ScaleKind::per_tensor);

    // The attention stage keeps the scales and O's dtype.
    const Problem attention = runtime::attention_stage_problem(problem, nullptr);
    EXPECT_EQ(attention.dtype, dtype);
    EXPECT_EQ(attention.out_dtype, DType::bf16);
    EXPECT_EQ(attention.fp8.kind, Fp8ScaleKind::per_tensor);
    EXPECT_EQ(attention.fp8.q_descale, 0.5);
    EXPECT_EQ(attention.fp8.k_descale, 0.25);
    EXPECT_EQ(attention.fp8.v_descale, 2.0);
  }
}

// Per-page scales with bf16 new tokens: the quantizing append's kernel, a thread group per
// (sequence, page segment, KV head) of K and of V (one new token reaches at most 2 pages).
TEST(AppendKvDispatch, Fp8PerPageAppendPlansTheQuantizingKernel) {
  runtime::Registry registry;
  runtime::Dispatcher dispatcher = dispatcher_for(registry);
  // The bf16 append's problem with an e4m3 pool, Q and per-page scales; new tokens stay bf16.
  Problem problem = paged_append(false, false);
  const auto fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  problem.dtype = DType::fp8_e4m3;
  problem.out_dtype = DType::bf16;
  problem.k = problem.v = bshd(fake, DType::fp8_e4m3, 12, 16, 2, 128, MemorySpace::device);
  problem.q = bshd(fake, DType::fp8_e4m3, 3, 1, 8, 128, MemorySpace::device);
  problem.fp8.kind = Fp8ScaleKind::per_page;
  TensorView scales = contiguous_view(fake, DType::fp32, {12, 2});
  scales.space = MemorySpace::device;
  problem.fp8.k_page = problem.fp8.v_page = scales;
  ASSERT_NO_THROW(validate(problem));
  const auto verdicts = dispatcher.explain(problem);  // best_of points into it
  const auto* append = best_of(verdicts, Family::fwd_appendkv);
  ASSERT_NE(append, nullptr);
  EXPECT_EQ(append->kernel.fp8_scale, Fp8ScaleKind::per_page);
  const codegen::AppendKvRuns runs = codegen::appendkv_runs(problem);
  EXPECT_EQ(runs.segments, 2);
  EXPECT_EQ(runs.groups(), 2 * 3 * 2 * 2);
  // Without its scale tables the problem is refused, naming them.
  problem.fp8.k_page = TensorView{};
  try {
    validate(problem);
    ADD_FAILURE() << "a quantizing append without fp8.k_page validated";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()).rfind("fp8.k_page is missing", 0), 0u) << error.what();
  }
}

TEST(AppendKvDispatch, WorkspaceNestsTheAttentionAfterTheKeyCounts) {
  Problem chained = paged_append(true, true);
  chained.append.rope_position_offsets = {0, 5, 1};
  const runtime::WorkspaceLayout layout = runtime::workspace_layout(chained, 1, 4096);
  EXPECT_GE(layout.seqlen_k, 0);
  EXPECT_GE(layout.rope_position_offsets, 0);
  ASSERT_GE(layout.key_lengths_after, 0);
  ASSERT_GE(layout.attention, layout.key_lengths_after + 3 * 8);
  EXPECT_EQ(layout.attention % 256, 0);
  EXPECT_GE(layout.bytes, layout.attention + 4096);
  // Append only: no key counts after, no nested attention.
  const runtime::WorkspaceLayout plain = runtime::workspace_layout(paged_append(false, true), 1);
  EXPECT_EQ(plain.key_lengths_after, -1);
  EXPECT_EQ(plain.attention, -1);

  // The attention stage reads the counts the append wrote, never the host vector.
  const auto* after = reinterpret_cast<const int64_t*>(uintptr_t{1} << 24);
  const Problem attend = runtime::attention_stage_problem(chained, after);
  EXPECT_EQ(attend.family, Family::fwd_pagedkv);
  EXPECT_TRUE(attend.seqlen_k_per_batch.empty());
  EXPECT_EQ(attend.device_indices.seqlen_k, after);
  EXPECT_EQ(attend.seqlen_k, 64);  // the longest cached length 63 plus one new token
}

TEST(AppendKvDispatch, PlanKeysTellAppendShapesApart) {
  const Problem base = paged_append(true, true);
  Problem no_output = paged_append(false, true);
  EXPECT_FALSE(runtime::PlanKey::of(base) == runtime::PlanKey::of(no_output));
  Problem more_tokens = base;
  more_tokens.append.seqlen_knew = 2;
  EXPECT_FALSE(runtime::PlanKey::of(base) == runtime::PlanKey::of(more_tokens));
  Problem unrotated = base;
  unrotated.append.rotate_q = false;
  EXPECT_FALSE(runtime::PlanKey::of(base) == runtime::PlanKey::of(unrotated));
  Problem other_lengths = base;
  other_lengths.seqlen_k_per_batch = {1, 2, 3};
  EXPECT_TRUE(runtime::PlanKey::of(base) == runtime::PlanKey::of(other_lengths));
}

}  // namespace
}  // namespace tilefmha
