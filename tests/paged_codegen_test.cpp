// The paged families on sm80_mma with no GPU: fwd_pagedkv and batch_prefill configs pass the
// support checks (and others are refused naming the field), their sources select the paged
// K/V path, they compile with NVRTC for sm_90a without spills, and the dispatcher picks them
// for paged problems, with the host page table's workspace region sized by its capacity class.
// On sm90 the Hopper kernel serves every page size: TMA boxes per page from 8 keys, row gathers
// below.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "codegen/fwd_sm80.hpp"
#include "codegen/fwd_sm90.hpp"
#include "runtime/candidates.hpp"
#include "runtime/dispatcher.hpp"
#include "runtime/fwd_sm90_params.hpp"
#include "runtime/heuristics.hpp"
#include "runtime/plan_key.hpp"
#include "runtime/stage_runner.hpp"
#include "support/compile_cases.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "support/refusal.hpp"
#include "templates/template_table.hpp"

namespace tilefmha {
namespace {

KernelConfig paged_config(Family family, PageTableKind table, int hdim) {
  KernelConfig c = testing::sm80_fwd_config(DType::bf16, hdim, hdim, 64, 64, 4, 2);
  c.family = family;
  c.page_table = table;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  if (family == Family::batch_prefill) c.mode = Mode::group;
  return c;
}

std::string refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_sm80(c); });
}

TEST(PagedCodegen, SupportChecksNameTheField) {
  EXPECT_EQ(refusal(paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table, 128)), "");
  EXPECT_EQ(refusal(paged_config(Family::batch_prefill, PageTableKind::sglang_page_list, 64)), "");
  EXPECT_NE(refusal(paged_config(Family::fwd_pagedkv, PageTableKind::none, 128)).find("page_table"),
            std::string::npos);
  KernelConfig unpadded = paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table, 128);
  unpadded.pad_seqlen_k = unpadded.pad_seqlen_q = false;
  EXPECT_NE(refusal(unpadded).find("pad_seqlen_k"), std::string::npos);
  // The contiguous forward still refuses a page table.
  KernelConfig contiguous = testing::sm80_fwd_config(DType::bf16, 128, 128, 64, 64, 4, 2);
  contiguous.page_table = PageTableKind::vllm_block_table;
  EXPECT_NE(refusal(contiguous).find("page_table"), std::string::npos);
}

TEST(PagedCodegen, SourcesSelectThePagedPath) {
  const std::string paged = codegen::generate_sm80_source(
      paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table, 128));
  EXPECT_NE(paged.find("/*split_kv=*/false, /*paged=*/true"), std::string::npos) << paged;
  // Split-KV partials over pages: paged decode's long contexts.
  const std::string split = codegen::generate_sm80_source(
      paged_config(Family::fwd_splitkv, PageTableKind::vllm_block_table, 128));
  EXPECT_NE(split.find("/*split_kv=*/true, /*paged=*/true"), std::string::npos) << split;
  const std::string contiguous =
      codegen::generate_sm80_source(testing::sm80_fwd_config(DType::bf16, 128, 128, 64, 64, 4, 2));
  EXPECT_EQ(contiguous.find("paged"), std::string::npos) << contiguous;
}

// The Hopper kernel reads tables of any page size (page_size 0), a page at a time; the
// size-specialized tables are sm80_mma's.
KernelConfig sm90_paged_config(Family family, PageTableKind table) {
  KernelConfig c = testing::sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  c.family = family;
  c.page_table = table;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  if (family == Family::batch_prefill) c.mode = Mode::group;
  return c;
}

std::string sm90_refusal(const KernelConfig& c) {
  return testing::not_supported_message([&] { codegen::check_supported_sm90(c); });
}

TEST(PagedCodegen, HopperReadsWholeBlocksFromPages) {
  const KernelConfig decode =
      sm90_paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table);
  EXPECT_EQ(sm90_refusal(decode), "");
  EXPECT_EQ(sm90_refusal(sm90_paged_config(Family::batch_prefill, PageTableKind::sglang_page_list)),
            "");
  // The size-specialized tables are sm80_mma's; the any-size kernel serves pages of 16.
  KernelConfig specialized = decode;
  specialized.page_size = 16;
  EXPECT_NE(sm90_refusal(specialized).find("page_size"), std::string::npos);
  KernelConfig unpadded = decode;
  unpadded.pad_seqlen_k = false;
  EXPECT_NE(sm90_refusal(unpadded).find("pad_seqlen_k"), std::string::npos);
  const std::string source = codegen::generate_sm90_source(decode);
  EXPECT_NE(source.find("/*split_kv=*/false, /*paged=*/true"), std::string::npos) << source;
  KernelConfig split = sm90_paged_config(Family::fwd_splitkv, PageTableKind::vllm_block_table);
  split.block_m = 64;
  split.warps = 8;
  split.lse = false;
  EXPECT_NE(codegen::generate_sm90_source(split).find("/*split_kv=*/true, /*paged=*/true"),
            std::string::npos);
  // The contiguous forward's source is unchanged: no paged flag, no gather entry.
  EXPECT_EQ(codegen::generate_sm90_source(testing::sm90_fwd_config(DType::bf16, 128, 128, 128, 128))
                .find("paged"),
            std::string::npos);
}

// A paged module carries the gather entry, whose producer takes 56 registers: beside two
// consumer warpgroups that leaves 224, too few for the 128x192 tile's S, P and O, which the
// contiguous forward (240 registers) keeps.
TEST(PagedCodegen, RefusesTheWideTileItsGatherEntryWouldSpill) {
  KernelConfig wide = sm90_paged_config(Family::batch_prefill, PageTableKind::vllm_block_table);
  wide.block_n = 192;
  const std::string refusal = sm90_refusal(wide);
  EXPECT_EQ(refusal.rfind("block_n = 192", 0), 0u) << refusal;
  EXPECT_NE(refusal.find("over the 224"), std::string::npos) << refusal;
  EXPECT_EQ(sm90_refusal(testing::sm90_fwd_config(DType::bf16, 128, 128, 128, 192)), "");
}

TEST(PagedCodegen, CompilesForSm90a) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<testing::CompileCase> cases;
  KernelConfig decode = paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table, 128);
  decode.mask = MaskKind::causal;
  decode.lse = true;
  KernelConfig prefill = paged_config(Family::batch_prefill, PageTableKind::sglang_page_list, 64);
  prefill.bias = BiasKind::alibi;
  prefill.softcap = true;
  KernelConfig split = paged_config(Family::fwd_splitkv, PageTableKind::sglang_page_list, 128);
  split.page_size = 1;
  for (const KernelConfig& c : {decode, prefill, split})
    cases.push_back({c, codegen::generate_sm80_source(c)});
  KernelConfig hopper_decode =
      sm90_paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table);
  hopper_decode.mask = MaskKind::causal;
  hopper_decode.pack_gqa = true;
  KernelConfig hopper_prefill =
      sm90_paged_config(Family::batch_prefill, PageTableKind::sglang_page_list);
  hopper_prefill.lse = true;
  // The decode tile: 64 rows, one consumer warpgroup beside the producer.
  KernelConfig hopper_decode_64 = hopper_decode;
  hopper_decode_64.block_m = 64;
  hopper_decode_64.warps = 8;
  // Each paged module holds two entries (TMA per page, row gathers); both compile spill-free.
  for (const KernelConfig& c : {hopper_decode, hopper_prefill, hopper_decode_64})
    cases.push_back({c, codegen::generate_sm90_source(c)});
  testing::expect_compiles(cases, "sm_90a");
}

// A decode problem over a vLLM block table: 3 sequences, 8 query heads on 2 KV heads, pages of 16
// tokens, `pages_per_seq` pages each (the last sequences shorter). Planning reads shapes and
// traits only, so the views point nowhere (device space).
Problem paged_decode(int64_t pages_per_seq = 4) {
  const auto fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  const int64_t num_pages = 3 * pages_per_seq, longest = 16 * pages_per_seq;
  PagedKv paged;
  paged.table = PageTableKind::vllm_block_table;
  paged.page_size = 16;
  paged.num_pages = num_pages;
  paged.max_pages_per_seq = pages_per_seq;
  for (int32_t page = 0; page < num_pages; ++page) paged.block_table.push_back(page);
  ProblemBuilder builder(Family::fwd_pagedkv);
  builder.dtype(DType::bf16).shape(3, 8, 2, 1, longest, 128, 128).key_lengths({longest, 20, 1});
  builder.paged(paged);
  builder.q(bshd(fake, DType::bf16, 3, 1, 8, 128, MemorySpace::device));
  builder.o(bshd(fake, DType::bf16, 3, 1, 8, 128, MemorySpace::device));
  const TensorView pool = bshd(fake, DType::bf16, num_pages, 16, 2, 128, MemorySpace::device);
  builder.k(pool).v(pool);
  return builder.build();
}

// The same three sequences over 64 keys in pages of `page_size` keys.
Problem paged_decode_in_pages_of(int64_t page_size) {
  Problem problem = paged_decode(64 / page_size);
  problem.paged.page_size = page_size;
  problem.k.shape[1] = problem.v.shape[1] = page_size;
  problem.seqlen_k = 64;
  problem.seqlen_k_per_batch = {64, 20, 1};
  return problem;
}

// The sm90 dispatcher's verdicts on `problem` among the paged-decode kernels, best first.
std::vector<runtime::CandidateVerdict> hopper_paged_verdicts(const Problem& problem) {
  runtime::Registry registry;
  runtime::DispatcherOptions options;
  options.candidates = runtime::default_candidates(Arch::sm90, {Family::fwd_pagedkv});
  const runtime::Dispatcher dispatcher(registry, {Arch::sm90, 132, "test"}, options);
  return dispatcher.explain(problem);
}

// Pages of 4 keys are below the 8 rows a TMA box needs: the Hopper kernel gathers them row by
// row with its producer warpgroup (fmha/fwd_sm90_gather.h) and still wins the dispatch.
TEST(PagedDispatch, HopperGathersPagesBelowASwizzleAtom) {
  const Problem problem = paged_decode_in_pages_of(4);
  const auto verdicts = hopper_paged_verdicts(problem);
  ASSERT_FALSE(verdicts.empty());
  ASSERT_TRUE(verdicts[0].rejection.empty()) << verdicts[0].rejection;
  const KernelConfig& chosen = verdicts[0].kernel;
  EXPECT_EQ(chosen.family, Family::fwd_pagedkv);
  EXPECT_EQ(chosen.pipeline, Pipeline::sm90_ws);
  EXPECT_EQ(chosen.page_table, PageTableKind::vllm_block_table);
  EXPECT_EQ(chosen.page_size, 0);
  // The module's gather entry runs it; pages of 16 run the TMA entry, the kernel's symbol.
  const templates::KernelTemplate& hopper = templates::kernel_template(chosen);
  EXPECT_EQ(hopper.entry(chosen, problem, {}), chosen.symbol() + "_gather");
  EXPECT_EQ(hopper.entry(chosen, paged_decode(16), {}), chosen.symbol());
  const std::string source = codegen::generate_sm90_source(chosen);
  EXPECT_NE(source.find(chosen.symbol() + "_gather("), std::string::npos);
  EXPECT_NE(source.find("fwd_sm90_gather<Traits>"), std::string::npos);
  EXPECT_EQ(source.find("_cluster_merge("), std::string::npos) << "not a split kernel";
}

// A split kernel's module carries the entry whose clusters merge the splits; a plan that merges
// launches it with a cluster of the split count along x.
TEST(PagedDispatch, SplitKernelsCarryTheClusterMergeEntry) {
  KernelConfig split = testing::sm90_fwd_config(DType::bf16, 128, 128, 64, 128);
  split.family = Family::fwd_splitkv;
  split.page_table = PageTableKind::vllm_block_table;
  split.pad_seqlen_q = split.pad_seqlen_k = true;
  const std::string source = codegen::generate_sm90_source(split);
  EXPECT_NE(source.find(split.symbol() + "_cluster_merge("), std::string::npos);
  EXPECT_NE(source.find("fwd_sm90_cluster_merge<Traits>"), std::string::npos);
  const templates::KernelTemplate& hopper = templates::kernel_template(split);
  const Problem problem = paged_decode(16);
  EXPECT_EQ(hopper.entry(split, problem, {132, 4, true}), split.symbol() + "_cluster_merge");
  EXPECT_EQ(hopper.entry(split, problem, {132, 4, false}), split.symbol());
  const jit::LaunchShape merged = hopper.launch_shape(split, problem, {132, 4, true});
  EXPECT_EQ(merged.cluster[0], 4u);
  EXPECT_EQ(merged.grid[0] % 4, 0u);
  const jit::LaunchShape two_stage = hopper.launch_shape(split, problem, {132, 4, false});
  EXPECT_EQ(two_stage.cluster[0], 1u);
  // Programmatic dependency: the split kernel of a two-stage plan and clusters past 8 CTAs
  // launch behind the previous grid; smaller clusters in stream order (measured choices).
  EXPECT_TRUE(two_stage.programmatic_dependency);
  EXPECT_FALSE(merged.programmatic_dependency);
  const jit::LaunchShape sixteen = hopper.launch_shape(split, problem, {132, 16, true});
  EXPECT_EQ(sixteen.cluster[0], 16u);
  EXPECT_TRUE(sixteen.programmatic_dependency);
}

// A decode's packed GQA group (4 query rows here) fills a sliver of any tile: paged decode takes
// the 64-row tile (one consumer warpgroup) over the 128-row prefill tiles, for TMA pages and for
// gathered ones alike. With 128 rows only, page-1 decode at b32 read K/V at 50% of copy bandwidth
// against 67-70% on 64 rows (H100, bench/serving_bench.py, docs/performance.md).
TEST(PagedDispatch, PagedDecodeTakesTheSixtyFourRowTile) {
  for (int64_t page_size : {1, 16}) {
    SCOPED_TRACE(page_size);
    const auto verdicts = hopper_paged_verdicts(paged_decode_in_pages_of(page_size));
    ASSERT_FALSE(verdicts.empty());
    ASSERT_TRUE(verdicts[0].rejection.empty()) << verdicts[0].rejection;
    EXPECT_EQ(verdicts[0].kernel.pipeline, Pipeline::sm90_ws);
    EXPECT_EQ(verdicts[0].kernel.block_m, 64);
    EXPECT_EQ(verdicts[0].kernel.hdim_q, 128);
  }
}

// Gathers move 16-byte chunks of 16-bit elements: a head dim that is not a multiple of 8 would
// read past the row, so such problems stay on the portable kernel, with the reason named.
TEST(PagedDispatch, GathersNeedHeadDimsInWholeChunks) {
  Problem problem = paged_decode_in_pages_of(4);
  problem.hdim_q = problem.hdim_v = 100;
  KernelConfig padded = sm90_paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table);
  padded.pad_hdim_q = padded.pad_hdim_v = true;
  const auto rejection = templates::kernel_template(padded).can_implement(padded, problem);
  ASSERT_TRUE(rejection.has_value());
  EXPECT_EQ(rejection->field, "page_size");
  EXPECT_NE(rejection->text.find("multiples of 8"), std::string::npos) << rejection->text;
  problem.hdim_q = problem.hdim_v = 96;
  EXPECT_FALSE(templates::kernel_template(padded).can_implement(padded, problem).has_value());
}

// 24 query-head rows over 8k keys leave most of 132 SMs idle in one pass: the decode splits its
// keys with paged fwd_splitkv kernels, and the plan's workspace holds their partials.
TEST(PagedDispatch, LongPagedDecodeSplitsItsKeys) {
  runtime::Registry registry;
  runtime::DispatcherOptions options;
  options.candidates = runtime::default_candidates(
      Arch::sm90, {Family::fwd_pagedkv, Family::fwd_splitkv, Family::fwd_splitkv_combine});
  const runtime::DeviceInfo device{Arch::sm90, 132, "test"};
  runtime::Dispatcher dispatcher(registry, device, options);
  const Problem problem = paged_decode(512);
  ASSERT_TRUE(runtime::split_kv_allowed(problem));
  const auto verdicts = dispatcher.explain(problem);
  const auto split = std::find_if(verdicts.begin(), verdicts.end(), [](const auto& v) {
    return v.kernel.family == Family::fwd_splitkv && v.rejection.empty();
  });
  ASSERT_NE(split, verdicts.end()) << "no paged split kernel fits";
  EXPECT_EQ(split->kernel.page_table, PageTableKind::vllm_block_table);
  const int64_t splits =
      runtime::choose_num_splits(problem, runtime::launch_form(split->kernel, problem), device);
  EXPECT_GT(splits, 1);
  const runtime::WorkspaceLayout layout = runtime::workspace_layout(problem, splits);
  EXPECT_GE(layout.o_acc, 0);
  EXPECT_GE(layout.lse_acc, 0);
  // A short cache fills no fewer SMs by splitting: it runs in one pass.
  EXPECT_EQ(runtime::choose_num_splits(paged_decode(),
                                       runtime::launch_form(split->kernel, paged_decode()), device),
            1);
}

// Pages of 128 keys hold whole key blocks, pages of 16 nest in them: the Hopper kernel serves
// both, a box per block or per page.
TEST(PagedDispatch, NestingPagesRunOnHopper) {
  for (int64_t page_size : {16, 128}) {
    SCOPED_TRACE(page_size);
    Problem problem = paged_decode();
    problem.paged.page_size = page_size;
    problem.k.shape[1] = problem.v.shape[1] = page_size;
    const auto verdicts = hopper_paged_verdicts(problem);
    ASSERT_FALSE(verdicts.empty());
    ASSERT_TRUE(verdicts[0].rejection.empty()) << verdicts[0].rejection;
    EXPECT_EQ(verdicts[0].kernel.pipeline, Pipeline::sm90_ws);
    EXPECT_EQ(codegen::sm90_paged_box_rows(verdicts[0].kernel, problem),
              std::min<int64_t>(page_size, verdicts[0].kernel.block_n));
  }
}

// Paged 16-bit K and V of two panels or more in pages of 8 or 16 keys land in 8-row groups
// (fmha/fwd_sm90_kv_layout.h): one 5D box per page covers every panel. NHD pools carry the head
// among the panels, HND pools among the pages; larger pages, padded head dims, a single panel
// and fp8 keep a box per panel.
TEST(PagedDispatch, PagedKvLandsInGroupsOfEightRowsOfEveryPanel) {
  const KernelConfig hopper =
      sm90_paged_config(Family::fwd_pagedkv, PageTableKind::vllm_block_table);
  ASSERT_EQ(hopper.block_n, 128);
  for (int64_t page_size : {8, 16, 32, 128, 1024}) {
    SCOPED_TRACE(page_size);
    Problem problem = paged_decode();  // only the page size, views and head dims matter here
    problem.paged.page_size = page_size;
    problem.k.shape[1] = problem.v.shape[1] = page_size;
    problem.k.stride[0] = problem.v.stride[0] = page_size * 2 * 128;
    const codegen::Sm90KvGrouping grouping = codegen::sm90_kv_grouping(hopper, problem);
    const runtime::Sm90TensorMapSpecs specs = runtime::sm90_tensor_map_specs(problem, hopper);
    const auto rows = static_cast<uint32_t>(std::min<int64_t>(page_size, 128));
    if (page_size > codegen::kSm90GroupedMaxPageSize) {
      EXPECT_FALSE(grouping.grouped);
      EXPECT_EQ(specs.k.box, (std::vector<uint32_t>{64, rows, 1, 1}));
      continue;
    }
    EXPECT_TRUE(grouping.grouped);
    EXPECT_EQ(grouping.heads_in_pages, 0);
    // [12 pages, page_size slots, 2 heads, 128] in bf16: rows of 512 bytes, heads of 256.
    EXPECT_EQ(specs.k.dims, (std::vector<uint64_t>{64, 8, 4, uint64_t(page_size / 8), 12}));
    EXPECT_EQ(specs.k.strides_bytes,
              (std::vector<uint64_t>{512, 128, 8 * 512, uint64_t(page_size) * 512}));
    EXPECT_EQ(specs.k.box, (std::vector<uint32_t>{64, 8, 2, rows / 8, 1}));
    EXPECT_EQ(specs.v.box, specs.k.box);
  }

  // HND: [page, head, slot, dim] viewed as [page, slot, head, dim].
  Problem hnd = paged_decode();
  for (TensorView* pool : {&hnd.k, &hnd.v}) {
    pool->stride[1] = 128;
    pool->stride[2] = 16 * 128;
    pool->stride[0] = 2 * 16 * 128;
  }
  const codegen::Sm90KvGrouping by_page = codegen::sm90_kv_grouping(hopper, hnd);
  EXPECT_TRUE(by_page.grouped);
  EXPECT_EQ(by_page.heads_in_pages, 2);
  const runtime::Sm90TensorMapSpecs hnd_specs = runtime::sm90_tensor_map_specs(hnd, hopper);
  EXPECT_EQ(hnd_specs.v.dims, (std::vector<uint64_t>{64, 8, 2, 2, 24}));
  EXPECT_EQ(hnd_specs.v.strides_bytes, (std::vector<uint64_t>{256, 128, 2048, 4096}));

  // Heads neither side by side nor in whole pages: the panel layout.
  Problem strided = paged_decode();
  strided.k.stride[2] = strided.v.stride[2] = 192;
  strided.k.stride[1] = strided.v.stride[1] = 384;
  strided.k.stride[0] = strided.v.stride[0] = 16 * 384;
  EXPECT_FALSE(codegen::sm90_kv_grouping(hopper, strided).grouped);
  EXPECT_EQ(runtime::sm90_tensor_map_specs(strided, hopper).k.box.size(), 4u);

  const Problem nhd = paged_decode();
  Problem one_panel = nhd;
  one_panel.hdim_q = one_panel.hdim_v = 64;
  KernelConfig hopper_64 = hopper;
  hopper_64.hdim_q = hopper_64.hdim_v = 64;
  EXPECT_FALSE(codegen::sm90_kv_grouping(hopper_64, one_panel).grouped);
  Problem padded = nhd;
  padded.hdim_q = padded.hdim_v = 96;
  EXPECT_FALSE(codegen::sm90_kv_grouping(hopper, padded).grouped);
  KernelConfig fp8 = hopper;
  fp8.dtype = DType::fp8_e4m3;
  EXPECT_FALSE(codegen::sm90_kv_grouping(fp8, nhd).grouped);
  Problem contiguous = nhd;
  contiguous.paged = PagedKv{};
  EXPECT_FALSE(codegen::sm90_kv_grouping(hopper, contiguous).grouped);
}

TEST(PagedDispatch, HostPageTablesGetWorkspaceByCapacityClass) {
  Problem problem = paged_decode();
  const runtime::WorkspaceLayout layout = runtime::workspace_layout(problem, 1);
  ASSERT_GE(layout.block_table, 0);
  EXPECT_EQ(runtime::page_table_capacity(problem.paged), 16);  // 12 entries round up to 16
  EXPECT_GE(layout.bytes, layout.block_table + 16 * 4);
  // A longer table in the same class shares the plan key; one past the class does not.
  Problem longer = problem;
  longer.paged.block_table.resize(16, 0);
  EXPECT_EQ(runtime::PlanKey::of(longer), runtime::PlanKey::of(problem));
  longer.paged.block_table.resize(17, 0);
  EXPECT_FALSE(runtime::PlanKey::of(longer) == runtime::PlanKey::of(problem));
}

}  // namespace
}  // namespace tilefmha
