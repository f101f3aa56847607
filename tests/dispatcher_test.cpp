#include "runtime/dispatcher.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/candidates.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::runtime;

namespace {

// Planning reads shapes and traits only, so the problem's views point nowhere (device space).
Problem problem(int64_t seqlen, MaskKind mask = MaskKind::none) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(2, 8, 8, seqlen, seqlen, 128, 128);
  if (mask == MaskKind::causal) builder.causal();
  auto fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  const auto view = bshd(fake, DType::bf16, 2, seqlen, 8, 128, MemorySpace::device);
  return builder.q(view).k(view).v(view).o(view).build();
}

KernelConfig sm80_kernel(MaskKind mask, bool pad, int32_t block_m = 128) {
  KernelConfig c;
  c.arch = Arch::sm90;
  c.pipeline = Pipeline::sm80_mma;
  c.mask = mask;
  c.block_m = block_m;
  c.block_n = 64;
  c.warps = 4;
  c.pad_seqlen_q = c.pad_seqlen_k = pad;
  return c;
}

// An sm90 dispatcher over the default forward candidates, for planning only (nothing runs, so
// problems may point anywhere in device space).
struct Sm90Planner {
  static DispatcherOptions options() {
    DispatcherOptions options;
    options.candidates = default_candidates(Arch::sm90, {Family::fwd});
    return options;
  }
  Registry registry;
  Dispatcher dispatcher{registry, {Arch::sm90, 132, "test"}, options()};
  void* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
};

std::shared_ptr<const jit::KernelCache> temporary_cache() {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "tilefmha_dispatcher_cache";
  return std::make_shared<jit::KernelCache>(dir);
}

}  // namespace

TEST(Dispatcher, ExplainRanksFittingKernelsFirst) {
  Registry registry;
  DispatcherOptions options;
  options.candidates = {sm80_kernel(MaskKind::none, false), sm80_kernel(MaskKind::causal, false),
                        sm80_kernel(MaskKind::causal, true),
                        sm80_kernel(MaskKind::causal, false, 64)};
  Dispatcher dispatcher(registry, {Arch::sm90, 132, "test"}, options);
  const auto verdicts = dispatcher.explain(problem(1024, MaskKind::causal));
  ASSERT_EQ(verdicts.size(), 4u);
  EXPECT_TRUE(verdicts[0].rejection.empty());
  // Unneeded padding costs predication: the unpadded causal kernel ranks first.
  EXPECT_FALSE(verdicts[0].kernel.pad_seqlen_q);
  EXPECT_EQ(verdicts[0].kernel.mask, MaskKind::causal);
  EXPECT_EQ(verdicts.back().rejection.rfind("mask", 0), 0u);
}

TEST(Dispatcher, NoFittingKernelNamesTheClosestCandidates) {
  Registry registry;
  DispatcherOptions options;
  options.candidates = {sm80_kernel(MaskKind::none, false)};
  Dispatcher dispatcher(registry, {Arch::sm90, 132, "test"}, options);
  try {
    dispatcher.plan(problem(1000, MaskKind::causal));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_kernel);
    const std::string message = e.what();
    EXPECT_NE(message.find(sm80_kernel(MaskKind::none, false).name()), std::string::npos);
    EXPECT_NE(message.find("pad_seqlen_q"), std::string::npos) << message;
  }
}

TEST(Dispatcher, PlanCompilesOnFirstUseAndIsCachedBySignature) {
  Registry registry;
  DispatcherOptions options;
  options.candidates = {sm80_kernel(MaskKind::causal, true)};
  options.cache = temporary_cache();
  Dispatcher dispatcher(registry, {Arch::sm90, 132, "test"}, options);
  const auto first = dispatcher.plan(problem(1000, MaskKind::causal));
  ASSERT_EQ(first->stages.size(), 1u);
  EXPECT_TRUE(registry.is_built(first->stages[0].kernel));
  EXPECT_GT(first->stages[0].shape.grid[0], 0u);
  EXPECT_EQ(dispatcher.plan(problem(1000, MaskKind::causal)).get(), first.get());
  EXPECT_NE(dispatcher.plan(problem(999, MaskKind::causal)).get(), first.get());
}

TEST(Dispatcher, PlanKeySeparatesTraitsButNotPointers) {
  const Problem a = problem(512);
  Problem b = a;
  b.q.data = reinterpret_cast<void*>(uintptr_t{1} << 24);
  EXPECT_EQ(PlanKey::of(a), PlanKey::of(b));
  EXPECT_EQ(PlanKey::of(a).hash(), PlanKey::of(b).hash());
  // Every kind of field in the list separates keys: a bool, an enum, a count, a nested field.
  Problem capped = a;
  capped.softcap = 30;
  Problem masked = a;
  masked.mask.kind = MaskKind::causal;
  Problem heads = a;
  heads.nhead_k = 4;
  Problem window = a;
  window.mask.window_left = 7;
  Problem split = a;
  split.split.num_splits = 3;
  // bwd.dsink's presence sizes plan workspace (its partials), though it selects no kernel.
  Problem sink_gradient = a;
  sink_gradient.bwd.dsink.data = reinterpret_cast<void*>(uintptr_t{1} << 24);
  for (const Problem* other : {&capped, &masked, &heads, &window, &split, &sink_gradient}) {
    EXPECT_NE(PlanKey::of(a), PlanKey::of(*other)) << PlanKey::of(*other).describe();
    EXPECT_NE(PlanKey::of(a).hash(), PlanKey::of(*other).hash());
  }
  EXPECT_NE(PlanKey::of(a).describe().find("nhead_k=8"), std::string::npos)
      << PlanKey::of(a).describe();
}

// A launch form chosen for one problem (packed GQA for decode rows) must not reach another
// problem's plan through the registry, where the built packed kernel stays listed. Regression:
// a 16/16-head problem planned after a 32/8-head decode got the packed kernel and failed with
// "nhead_q / nhead_k = 1: packed GQA needs a group of 2..64 dividing 64".
TEST(Dispatcher, LaunchFormsDoNotLeakBetweenProblems) {
  Registry registry;
  DispatcherOptions options;
  KernelConfig kernel;
  kernel.arch = Arch::sm90;
  kernel.pipeline = Pipeline::sm90_ws;
  kernel.block_m = 128;
  kernel.block_n = 128;
  kernel.block_k = 128;
  kernel.warps = 12;
  kernel.stages = 2;
  kernel.pad_seqlen_q = kernel.pad_seqlen_k = true;
  KernelConfig packed = kernel;
  packed.pack_gqa = true;
  KernelConfig persistent = kernel;
  persistent.persistent = true;
  // Already built (fake cubins: planning without a GPU never loads them).
  for (const KernelConfig& c : {kernel, packed, persistent}) registry.add(c, {'x'});
  Dispatcher dispatcher(registry, {Arch::sm90, 132, "test"}, options);
  auto make = [](int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hk) {
    void* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
    ProblemBuilder b(Family::fwd);
    b.dtype(DType::bf16).shape(batch, hq, hk, sq, sk, 128, 128);
    b.q(bshd(fake, DType::bf16, batch, sq, hq, 128, MemorySpace::device));
    b.k(bshd(fake, DType::bf16, batch, sk, hk, 128, MemorySpace::device));
    b.v(bshd(fake, DType::bf16, batch, sk, hk, 128, MemorySpace::device));
    b.o(bshd(fake, DType::bf16, batch, sq, hq, 128, MemorySpace::device));
    b.splits(1);  // one pass: this test is about the forward kernel's launch form
    return b.build();
  };
  const auto decode = dispatcher.plan(make(32, 1, 16384, 32, 8));
  EXPECT_TRUE(decode->stages.front().kernel.pack_gqa);
  const auto dense = dispatcher.plan(make(2, 8192, 8192, 16, 16));
  EXPECT_FALSE(dense->stages.front().kernel.pack_gqa) << dense->explanation;
  for (const CandidateVerdict& verdict : dispatcher.explain(make(2, 8192, 8192, 16, 16))) {
    EXPECT_FALSE(verdict.kernel.pack_gqa) << verdict.kernel.name();
    EXPECT_FALSE(verdict.kernel.persistent) << verdict.kernel.name();
  }
}

// Every forward feature has a kernel on sm90 in the default candidates (the full profile), so
// the GPU backend never answers "no kernel" for a valid forward problem.
TEST(Dispatcher, DefaultCandidatesServeEveryForwardFeature) {
  Sm90Planner planner;
  Dispatcher& dispatcher = planner.dispatcher;
  void* fake = planner.fake;
  auto base = [&](int64_t sq, int64_t hq, int64_t hv) {
    ProblemBuilder b(Family::fwd);
    b.dtype(DType::bf16).shape(2, 8, 2, sq, sq, hq, hv);
    b.q(bshd(fake, DType::bf16, 2, sq, 8, hq, MemorySpace::device));
    b.k(bshd(fake, DType::bf16, 2, sq, 2, hq, MemorySpace::device));
    b.v(bshd(fake, DType::bf16, 2, sq, 2, hv, MemorySpace::device));
    b.o(bshd(fake, DType::bf16, 2, sq, 8, hv, MemorySpace::device));
    return b;
  };
  const auto slopes = contiguous_view(fake, DType::fp32, {8}, MemorySpace::device);
  std::vector<Problem> problems = {
      base(256, 128, 128).build(),
      base(1000, 128, 128).causal(MaskAlign::bottom_right).build(),
      base(130, 72, 72).build(),
      base(130, 192, 128).build(),
      base(300, 64, 64).window(64, 0).sink_tokens(4).softcap(30).alibi(slopes).build(),
      base(200, 256, 256).dropout(0.2, 7).sink_logits(slopes).build(),
  };
  for (const Problem& problem : problems) {
    const auto verdicts = dispatcher.explain(problem);
    ASSERT_FALSE(verdicts.empty());
    EXPECT_EQ(verdicts.front().rejection, "") << problem.describe();
  }
  // Hopper's own pipeline wins where it fits.
  EXPECT_EQ(dispatcher.explain(problems[0]).front().kernel.pipeline, Pipeline::sm90_ws);
  EXPECT_EQ(dispatcher.explain(problems[1]).front().kernel.pipeline, Pipeline::sm90_ws);
  // Causal rows skip blocks: the 128-wide key tile beats the 192-wide one (H100 measurements).
  EXPECT_EQ(dispatcher.explain(problems[1]).front().kernel.block_n, 128);
  // Head dim 72 runs on the 128-wide panels, zero-filled by TMA, before the portable pipeline;
  // an exact head dim prefers the unpadded kernel.
  const KernelConfig padded = dispatcher.explain(problems[2]).front().kernel;
  EXPECT_EQ(padded.pipeline, Pipeline::sm90_ws);
  EXPECT_EQ(padded.hdim_q, 128);
  EXPECT_TRUE(padded.pad_hdim_q && padded.pad_hdim_v);
  EXPECT_FALSE(dispatcher.explain(problems[0]).front().kernel.pad_hdim_q);
  // A head dim that is not a multiple of 8 leaves sm90_ws for sm80_mma.
  const Problem odd = base(130, 36, 36).build();
  EXPECT_EQ(dispatcher.explain(odd).front().kernel.pipeline, Pipeline::sm80_mma);
}

// hdim 64 on Hopper: 64-row tiles (two CTAs per SM) for masked rows of 512 to 2k, the 192-row
// tile for longer masked rows and for unmasked ones (H100 measurements, docs/performance.md).
TEST(Dispatcher, Hdim64TileFollowsTheRowsAndTheMask) {
  Sm90Planner planner;
  Dispatcher& dispatcher = planner.dispatcher;
  void* fake = planner.fake;
  auto block_m = [&](int64_t seqlen, bool causal) {
    const int64_t batch = 16384 / seqlen;
    ProblemBuilder b(Family::fwd);
    b.dtype(DType::bf16).shape(batch, 32, 32, seqlen, seqlen, 64, 64);
    const auto view = bshd(fake, DType::bf16, batch, seqlen, 32, 64, MemorySpace::device);
    b.q(view).k(view).v(view).o(view);
    if (causal) b.causal();
    const KernelConfig kernel = dispatcher.explain(b.build()).front().kernel;
    EXPECT_EQ(kernel.pipeline, Pipeline::sm90_ws);
    return kernel.block_m;
  };
  EXPECT_EQ(block_m(512, true), 64);
  EXPECT_EQ(block_m(2048, true), 64);
  EXPECT_EQ(block_m(8192, true), 192);
  EXPECT_EQ(block_m(1024, false), 192);
}

// Decode rows (a packed GQA group, or a few query positions) fit the 64-row tile, which runs two
// CTAs per SM; the 192-row tile left hdim-64 decode at 52-68% of copy bandwidth (H200).
TEST(Dispatcher, DecodeRowsTakeTheSixtyFourRowTile) {
  Sm90Planner planner;
  auto block_m = [&](int64_t batch, int64_t hq, int64_t hk, int64_t sq, int64_t sk) {
    ProblemBuilder b(Family::fwd);
    b.dtype(DType::bf16).shape(batch, hq, hk, sq, sk, 64, 64);
    b.q(bshd(planner.fake, DType::bf16, batch, sq, hq, 64, MemorySpace::device));
    b.k(bshd(planner.fake, DType::bf16, batch, sk, hk, 64, MemorySpace::device));
    b.v(bshd(planner.fake, DType::bf16, batch, sk, hk, 64, MemorySpace::device));
    b.o(bshd(planner.fake, DType::bf16, batch, sq, hq, 64, MemorySpace::device));
    return planner.dispatcher.explain(b.build()).front().kernel.block_m;
  };
  EXPECT_EQ(block_m(32, 32, 8, 1, 32768), 64);  // packed group of 4
  EXPECT_EQ(block_m(8, 32, 32, 16, 8192), 64);  // 16 query positions
  EXPECT_EQ(block_m(128, 32, 8, 1, 1024), 64);
  EXPECT_EQ(block_m(2, 32, 32, 4096, 4096), 192);  // prefill keeps the big tile
}
