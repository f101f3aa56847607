// Planning the GPU backward with no GPU: a backward problem (family bwd_dq_dk_dv, as the Python
// and CLI backward build it) is one plan of three stages in order, with D and the fp32 dQ
// accumulator in plan workspace when the caller brings none (one accumulator slice per key
// block in deterministic mode), and what the kernels lack is refused naming the field. Kernels
// compile through NVRTC (skipped without it); nothing launches.
#include <gtest/gtest.h>

#include <string>

#include "jit/module.hpp"
#include "runtime/bwd_params.hpp"
#include "runtime/candidates.hpp"
#include "runtime/dispatcher.hpp"
#include "runtime/stage_runner.hpp"
#include "support/gpu_availability.hpp"
#include "support/kernel_configs.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

void* const kFake = reinterpret_cast<void*>(uintptr_t{1} << 20);

// Planning reads shapes and traits only: the views point nowhere (device space).
ProblemBuilder backward(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_q,
                        int64_t seqlen_k, int64_t hdim, DType dtype = DType::bf16) {
  ProblemBuilder b(Family::bwd_dq_dk_dv);
  b.dtype(dtype).shape(batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, hdim);
  const auto q = bshd(kFake, dtype, batch, seqlen_q, nhead_q, hdim, MemorySpace::device);
  const auto k = bshd(kFake, dtype, batch, seqlen_k, nhead_k, hdim, MemorySpace::device);
  b.q(q).k(k).v(k).o(q).lse(
      contiguous_view(kFake, DType::fp32, {batch, nhead_q, seqlen_q}, MemorySpace::device));
  Backward g;
  g.d_o = g.dq = q;
  g.dk = g.dv = k;
  b.backward(g);
  return b;
}

// The problem with its own D and dQ accumulator (fake device views).
Problem with_scratch(ProblemBuilder builder) {
  Problem p = builder.build();
  p.bwd.d = p.lse;
  p.bwd.dq_acc = contiguous_view(kFake, DType::fp32, {p.batch, p.seqlen_q, p.nhead_q, p.hdim_q},
                                 MemorySpace::device);
  return p;
}

struct Sm80Planner {
  static DispatcherOptions options() {
    DispatcherOptions options;
    options.candidates = default_candidates(
        Arch::sm80, {Family::bwd_dot_do_o, Family::bwd_dq_dk_dv, Family::bwd_convert_dq});
    return options;
  }
  Registry registry;
  Dispatcher dispatcher{registry, {Arch::sm80, 108, "test"}, options()};
};

TEST(BwdPlan, WorkspaceHoldsDAndTheDqAccumulator) {
  const Problem p = backward(2, 8, 2, 77, 130, 128).causal().build();
  const WorkspaceLayout layout = workspace_layout(p, 1);
  ASSERT_GE(layout.bwd_d, 0);
  ASSERT_GE(layout.dq_acc, 0);
  EXPECT_EQ(layout.bwd_d % 256, 0);
  EXPECT_EQ(layout.dq_acc % 256, 0);
  EXPECT_GE(layout.dq_acc, layout.bwd_d + 2 * 8 * 77 * 4);
  EXPECT_EQ(layout.dq_slices, 1);
  EXPECT_GE(layout.bytes, layout.dq_acc + 2 * 77 * 8 * 128 * 4);

  // Deterministic: the slices, each on a 16-byte boundary.
  Problem deterministic = p;
  deterministic.bwd.deterministic = true;
  const WorkspaceLayout sliced =
      workspace_layout(deterministic, 1, /*attention_bytes=*/0, {.dq_slices = 3});
  EXPECT_EQ(sliced.dq_slices, 3);
  EXPECT_EQ(sliced.dq_slice_stride % 4, 0);
  EXPECT_GE(sliced.dq_slice_stride, 2 * 77 * 8 * 128);
  EXPECT_GE(sliced.bytes, sliced.dq_acc + 3 * sliced.dq_slice_stride * 4);

  // A turn-taking sm90_ws kernel: one slice and a turn counter per (sequence, query head, query
  // block), after the accumulator.
  const WorkspaceLayout counted =
      workspace_layout(deterministic, 1, /*attention_bytes=*/0, {.dq_semaphores = 2 * 8 * 2});
  EXPECT_EQ(counted.dq_slices, 1);
  ASSERT_GE(counted.dq_semaphores, counted.dq_acc + counted.dq_slice_stride * 4);
  EXPECT_EQ(counted.dq_semaphore_count, 2 * 8 * 2);
  EXPECT_GE(counted.bytes, counted.dq_semaphores + 2 * 8 * 2 * 4);
  // The counters follow the planned kernel, not the problem's mode: an sm90_ws dq_dk_dv takes
  // turns in deterministic mode and, as its launch form, where turns pay in the default mode.
  PlannedStage stage;
  stage.kernel = testing::sm90_bwd_config(DType::bf16, 128);
  EXPECT_EQ(backward_workspace(p, {stage}).dq_semaphores, 0);
  stage.kernel.deterministic = true;
  EXPECT_EQ(backward_workspace(p, {stage}).dq_semaphores, 2 * 8 * 2);  // 77 rows: 2 blocks of 64

  // The caller's own D and accumulator take no workspace.
  Problem given = p;
  given.bwd.d = p.lse;
  given.bwd.dq_acc = contiguous_view(kFake, DType::fp32, {2, 77, 8, 128}, MemorySpace::device);
  const WorkspaceLayout none = workspace_layout(given, 1);
  EXPECT_EQ(none.bwd_d, -1);
  EXPECT_EQ(none.dq_acc, -1);
  EXPECT_EQ(none.bytes, 0);
}

// dSink partials: one fp32 per (bwd_dot_do_o CTA, query head) when bwd.dsink is set; none
// without it, sink logits or not.
TEST(BwdPlan, WorkspaceHoldsDsinkPartialsWhenAskedFor) {
  const TensorView sinks = contiguous_view(kFake, DType::fp32, {8}, MemorySpace::device);
  Problem p = backward(2, 8, 2, 77, 130, 128).sink_logits(sinks).build();
  EXPECT_EQ(workspace_layout(p, 1, 0, {.dsink_partial_count = 20}).dsink_partials, -1);
  p.bwd.dsink = sinks;
  const WorkspaceLayout layout = workspace_layout(p, 1, 0, {.dsink_partial_count = 20});
  ASSERT_GE(layout.dsink_partials, layout.dq_acc + layout.dq_slice_stride * 4);
  EXPECT_EQ(layout.dsink_partials % 256, 0);
  EXPECT_EQ(layout.dsink_partial_count, 20);
  EXPECT_GE(layout.bytes, layout.dsink_partials + 20 * 8 * 4);
}

TEST(BwdPlan, DsinkBindsThePlanPartialsOrIsRefused) {
  const TensorView sinks = contiguous_view(kFake, DType::fp32, {8}, MemorySpace::device);
  Problem p = with_scratch(backward(2, 8, 2, 77, 130, 128).sink_logits(sinks));
  BackwardScratch scratch;
  scratch.d = p.bwd.d;
  scratch.dq_acc = p.bwd.dq_acc;
  // Off without bwd.dsink, even where the plan holds partials.
  scratch.dsink_partials = static_cast<float*>(kFake);
  scratch.dsink_partial_count = 20;
  const fmha::BwdParams off = make_bwd_params(p, {}, scratch);
  EXPECT_EQ(off.dsink_partials, nullptr);
  EXPECT_EQ(off.dsink, nullptr);

  p.bwd.dsink = sinks;
  const fmha::BwdParams on = make_bwd_params(p, {}, scratch);
  EXPECT_EQ(on.dsink_partials, static_cast<float*>(kFake));
  EXPECT_EQ(on.dsink_partial_count, 20);
  EXPECT_EQ(on.dsink, static_cast<float*>(sinks.data));
  EXPECT_EQ(on.dsink_stride, 1);

  scratch.dsink_partials = nullptr;  // a plan made without bwd.dsink
  try {
    make_bwd_params(p, {}, scratch);
    ADD_FAILURE() << "bound bwd.dsink without partials";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bwd.dsink"), std::string::npos) << e.what();
  }
}

TEST(BwdPlan, OnePlanOfThreeStagesInOrder) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  Sm80Planner planner;
  // The caller's D and accumulator: a plan without workspace needs no device to allocate on.
  const Problem p = with_scratch(backward(2, 8, 2, 77, 130, 128).causal(MaskAlign::bottom_right));
  const auto plan = planner.dispatcher.plan(p);
  ASSERT_EQ(plan->stages.size(), 3u);
  EXPECT_EQ(plan->stages[0].kernel.family, Family::bwd_dot_do_o);
  EXPECT_EQ(plan->stages[1].kernel.family, Family::bwd_dq_dk_dv);
  EXPECT_EQ(plan->stages[1].kernel.pipeline, Pipeline::sm80_mma);
  EXPECT_EQ(plan->stages[2].kernel.family, Family::bwd_convert_dq);
  EXPECT_EQ(plan->workspace.bytes, 0);
  // One CTA per (key block, KV head, sequence).
  const KernelConfig& grad = plan->stages[1].kernel;
  EXPECT_EQ(plan->stages[1].shape.grid[0],
            static_cast<unsigned>((130 + grad.block_n - 1) / grad.block_n));
  EXPECT_EQ(plan->stages[1].shape.grid[1], 2u);
  EXPECT_EQ(plan->stages[1].shape.grid[2], 2u);
  EXPECT_GT(plan->stages[1].shape.dynamic_shared_bytes, 48u * 1024);
}

// The dSink partials are sized by the planned bwd_dot_do_o grid, which every CTA of it fills.
// The plan then owns workspace, which needs a device to allocate on.
TEST(BwdPlan, DsinkPartialsFollowTheDotStageGrid) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const jit::GpuContext context(0);
  Sm80Planner planner;
  const TensorView sinks = contiguous_view(kFake, DType::fp32, {8}, MemorySpace::device);
  Problem p = with_scratch(backward(2, 8, 2, 77, 130, 128).sink_logits(sinks));
  p.bwd.dsink = sinks;
  const auto plan = planner.dispatcher.plan(p);
  ASSERT_EQ(plan->stages.size(), 3u);
  const int64_t grid = plan->stages[0].shape.grid[0];
  EXPECT_EQ(grid,
            (2 * 77 * 8 + plan->stages[0].kernel.block_m - 1) / plan->stages[0].kernel.block_m);
  EXPECT_EQ(plan->workspace.dsink_partial_count, grid);
  EXPECT_GE(plan->workspace.dsink_partials, 0);
  EXPECT_GE(plan->workspace.bytes, plan->workspace.dsink_partials + grid * 8 * 4);
}

TEST(BwdPlan, OnlyTheWholeBackwardIsPlanned) {
  Sm80Planner planner;
  for (Family family : {Family::bwd_dot_do_o, Family::bwd_convert_dq}) {
    Problem p = with_scratch(backward(1, 2, 2, 64, 64, 64));
    p.family = family;
    try {
      planner.dispatcher.plan(p);
      ADD_FAILURE() << "planned " << to_string(family);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::not_supported);
      EXPECT_EQ(e.field(), "family");
      EXPECT_NE(std::string(e.what()).find("bwd_dq_dk_dv"), std::string::npos) << e.what();
    }
  }
}

TEST(BwdPlan, DeterministicStagesTakeDeterministicKernels) {
  Sm80Planner planner;
  Problem p = backward(2, 8, 2, 77, 130, 64).build();
  p.bwd.deterministic = true;
  bool grad = false, convert = false;
  for (const CandidateVerdict& verdict : planner.dispatcher.explain(p)) {
    if (!verdict.rejection.empty()) continue;
    if (verdict.kernel.family == Family::bwd_dq_dk_dv) grad = verdict.kernel.deterministic;
    if (verdict.kernel.family == Family::bwd_convert_dq) convert = verdict.kernel.deterministic;
  }
  EXPECT_TRUE(grad);
  EXPECT_TRUE(convert);
}

TEST(BwdPlan, UnsupportedFeaturesAreRefusedByName) {
  Sm80Planner planner;
  auto refusal = [&](const Problem& p) {
    try {
      planner.dispatcher.plan(p);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::no_kernel) << e.what();
      return std::string(e.what());
    }
    return std::string();
  };
  // A broadcast dBias is summed with fp32 atomics: a bf16 one has no kernel, named.
  TensorView bias = contiguous_view(kFake, DType::bf16, {1, 8, 64, 64}, MemorySpace::device);
  bias.shape[0] = 2;
  bias.stride[0] = 0;
  Problem p = with_scratch(backward(2, 8, 2, 64, 64, 64).bias(bias));
  p.bwd.dbias = bias;
  EXPECT_NE(refusal(p).find("no kernel for stage bwd_dq_dk_dv"), std::string::npos);
  // The kernels matching every trait are refused naming the view (explain lists them).
  int dbias_kernels = 0;
  for (const CandidateVerdict& verdict : planner.dispatcher.explain(p)) {
    if (verdict.kernel.family != Family::bwd_dq_dk_dv) continue;
    EXPECT_FALSE(verdict.rejection.empty()) << verdict.kernel.name();
    if (verdict.rejection_field != "bwd.dbias") continue;
    ++dbias_kernels;
    EXPECT_TRUE(verdict.kernel.dbias);
    EXPECT_NE(verdict.rejection.find("fp32"), std::string::npos) << verdict.rejection;
  }
  EXPECT_GT(dbias_kernels, 0);
}

// ALiBi, dropout and an elementwise bias with its dBias plan on kernels carrying the traits.
TEST(BwdPlan, ForwardFeaturesPlanWithTheirGradients) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  Sm80Planner planner;
  auto grad_kernel = [&](const Problem& p) {
    const auto plan = planner.dispatcher.plan(p);
    EXPECT_EQ(plan->stages.size(), 3u);
    return plan->stages[1].kernel;
  };
  const auto slopes = contiguous_view(kFake, DType::fp32, {8}, MemorySpace::device);
  const KernelConfig alibi = grad_kernel(with_scratch(backward(1, 8, 2, 64, 64, 64).alibi(slopes)));
  EXPECT_EQ(alibi.bias, BiasKind::alibi);
  EXPECT_FALSE(alibi.dropout);
  const KernelConfig dropout =
      grad_kernel(with_scratch(backward(1, 8, 2, 64, 64, 128).causal().dropout(0.1, 1)));
  EXPECT_TRUE(dropout.dropout);
  const TensorView bias = contiguous_view(kFake, DType::fp32, {2, 8, 64, 64}, MemorySpace::device);
  Problem biased = with_scratch(backward(2, 8, 2, 64, 64, 256).bias(bias));
  biased.bwd.dbias = bias;
  const KernelConfig dbias = grad_kernel(biased);
  EXPECT_EQ(dbias.bias, BiasKind::elementwise);
  EXPECT_TRUE(dbias.dbias);
  EXPECT_EQ(dbias.warps, 2 * dbias.block_n / 16);
}

// Head dims past 128 plan on the column-split kernel: two warps per 16 keys.
TEST(BwdPlan, WideHeadDimsTakeTheColumnSplit) {
  if (!testing::nvrtc_available()) GTEST_SKIP() << "NVRTC not found";
  Sm80Planner planner;
  for (int64_t hdim : {160, 192, 256}) {
    const auto plan = planner.dispatcher.plan(
        with_scratch(backward(1, 8, 2, 64, 130, hdim).causal(MaskAlign::bottom_right)));
    ASSERT_EQ(plan->stages.size(), 3u);
    const KernelConfig& grad = plan->stages[1].kernel;
    EXPECT_EQ(grad.hdim_q, hdim);
    EXPECT_EQ(grad.pipeline, Pipeline::sm80_mma);
    EXPECT_EQ(grad.warps, 2 * grad.block_n / 16) << grad.name();
    EXPECT_EQ(plan->stages[1].shape.grid[0],
              static_cast<unsigned>((130 + grad.block_n - 1) / grad.block_n));
  }
}

}  // namespace
}  // namespace tilefmha::runtime
