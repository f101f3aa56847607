// The accurate fp32 forward pipeline (simt_f32) on a GPU, end to end through the dispatcher:
// default candidates of the device's arch, JIT on first use, device copies of fresh random
// problems with poisoned outputs (NaN), and every element of O and LSE compared with the CPU
// reference at the fp32 tolerance (2e-5 abs + 2e-5 rel). Skipped without a GPU, driver or NVRTC.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "jit/kernel_cache.hpp"
#include "jit/module.hpp"
#include "runtime/candidates.hpp"
#include "runtime/device_info.hpp"
#include "runtime/dispatcher.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_problem.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

using testing::Dims;
using testing::gpu_skip_reason;
using testing::QkvLayout;
using testing::TensorPool;

// One context, registry and dispatcher for the whole suite, so kernels compile once.
struct GpuSession {
  jit::GpuContext context;
  runtime::DeviceInfo device = runtime::query_current_device();
  runtime::Registry registry;
  runtime::Dispatcher dispatcher{registry, device, options(device)};

  static runtime::DispatcherOptions options(const runtime::DeviceInfo& device) {
    runtime::DispatcherOptions options;
    options.candidates = runtime::default_candidates(device.arch, {Family::fwd});
    options.cache = std::make_shared<jit::KernelCache>(jit::KernelCache::default_directory());
    return options;
  }
};

// A contiguous fp32 tensor of the view's logical shape (rank 3 or 4), preset to NaN, for the
// reference's outputs.
TensorView like(TensorPool& pool, const TensorView& view) {
  const auto& n = view.shape;
  if (view.rank == 3) return pool.filled(DType::fp32, {n[0], n[1], n[2]}, testing::kUnwritten);
  return pool.filled(DType::fp32, {n[0], n[1], n[2], n[3]}, testing::kUnwritten);
}

class FwdSimtGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (gpu_skip_reason().empty()) session_ = std::make_unique<GpuSession>();
  }
  static void TearDownTestSuite() { session_.reset(); }
  void SetUp() override {
    if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  }

  // Runs `host` (outputs preset to NaN) on the GPU through the dispatcher and checks O and LSE
  // element by element against the CPU reference; also that the plan chose simt_f32.
  void expect_matches_reference(TensorPool& pool, const Problem& host) {
    SCOPED_TRACE(host.describe());
    runtime::Dispatcher& dispatcher = session_->dispatcher;
    runtime::DeviceMirror mirror(host);
    const auto plan = dispatcher.plan(mirror.device_problem());
    ASSERT_EQ(plan->stages.size(), 1u);
    EXPECT_EQ(plan->stages[0].kernel.pipeline, Pipeline::simt_f32) << plan->explanation;
    dispatcher.run(*plan, mirror.device_problem());
    session_->context.synchronize();
    mirror.copy_outputs_to(host);

    Problem on_cpu = host;
    on_cpu.o = like(pool, host.o);
    if (host.return_lse) on_cpu.lse = like(pool, host.lse);
    reference::forward(on_cpu);

    const runtime::Tolerance o_tolerance = runtime::output_tolerance(DType::fp32);
    const runtime::Agreement o =
        testing::compare(on_cpu.o, host.o, o_tolerance.atol, o_tolerance.rtol);
    EXPECT_EQ(o.mismatches, 0) << "O: max abs err " << o.max_abs_error << ", max rel err "
                               << o.max_rel_error << " of " << o.compared;
    EXPECT_EQ(o.compared, host.o.numel());
    // Nothing written outside O's logical elements (the gaps of strided layouts).
    EXPECT_EQ(testing::clobbered_padding(mirror.download(mirror.device_problem().o)), 0);
    if (host.return_lse) {
      const runtime::Agreement lse = testing::compare(
          on_cpu.lse, host.lse, runtime::kLseTolerance.atol, runtime::kLseTolerance.rtol);
      EXPECT_EQ(lse.mismatches, 0) << "LSE: max abs err " << lse.max_abs_error;
    }
    std::printf("  %-60s %s: O max abs err %.2e\n", host.describe().c_str(),
                plan->stages[0].kernel.name().c_str(), o.max_abs_error);
  }

  static std::unique_ptr<GpuSession> session_;
};

std::unique_ptr<GpuSession> FwdSimtGpu::session_;

ProblemBuilder batch(TensorPool& pool, const Dims& d, QkvLayout layout = QkvLayout::bshd) {
  return testing::batch_problem(pool, Family::fwd, DType::fp32, d, layout);
}

TEST_F(FwdSimtGpu, Plain) {
  TensorPool pool(1);
  expect_matches_reference(pool, batch(pool, {2, 3, 3, 200, 333, 128, 128}).build());
  Problem without_lse = batch(pool, {2, 3, 3, 64, 96, 128, 128}).build();
  without_lse.return_lse = false;
  without_lse.lse = {};
  expect_matches_reference(pool, without_lse);
}

TEST_F(FwdSimtGpu, CausalBottomRightWithSqNotSk) {
  TensorPool pool(2);
  // sq > sk: the first 100 rows see no key (O = 0, LSE = -inf).
  expect_matches_reference(
      pool, batch(pool, {2, 2, 2, 300, 200, 64, 64}).causal(MaskAlign::bottom_right).build());
  expect_matches_reference(
      pool, batch(pool, {1, 3, 1, 100, 300, 64, 64}).causal(MaskAlign::bottom_right).build());
  expect_matches_reference(
      pool, batch(pool, {1, 2, 2, 130, 70, 32, 32}).causal(MaskAlign::top_left).build());
}

TEST_F(FwdSimtGpu, WindowWithSinkTokens) {
  TensorPool pool(3);
  for (MaskAlign align : {MaskAlign::top_left, MaskAlign::bottom_right})
    expect_matches_reference(
        pool, batch(pool, {2, 2, 2, 257, 300, 64, 64}).window(40, 0, align).sink_tokens(4).build());
  expect_matches_reference(pool, batch(pool, {1, 2, 1, 200, 200, 32, 32})
                                     .window(20, 33, MaskAlign::top_left)
                                     .sink_tokens(3)
                                     .build());
}

TEST_F(FwdSimtGpu, ElementwiseBiasBroadcast) {
  TensorPool pool(4);
  // One bias for every sequence (batch stride 0), and one row for every query (row stride 0).
  TensorView per_head = pool.uniform(DType::fp32, {1, 3, 90, 150}, -2, 2);
  per_head.shape[0] = 2;
  per_head.stride[0] = 0;
  expect_matches_reference(pool, batch(pool, {2, 3, 3, 90, 150, 64, 64}).bias(per_head).build());
  TensorView per_key = pool.uniform(DType::fp32, {2, 3, 1, 150}, -2, 2);
  per_key.shape[2] = 90;
  per_key.stride[2] = 0;
  expect_matches_reference(pool,
                           batch(pool, {2, 3, 3, 90, 150, 64, 64}).bias(per_key).causal().build());
}

TEST_F(FwdSimtGpu, Alibi) {
  TensorPool pool(5);
  expect_matches_reference(pool, batch(pool, {2, 4, 2, 150, 220, 64, 64})
                                     .alibi(pool.uniform(DType::fp32, {4}, 0.01, 0.3))
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(FwdSimtGpu, Softcap) {
  TensorPool pool(6);
  expect_matches_reference(
      pool, batch(pool, {2, 2, 2, 120, 180, 128, 128}).scale(1.0).softcap(8.0).build());
}

TEST_F(FwdSimtGpu, Dropout) {
  TensorPool pool(7);
  Problem p = batch(pool, {2, 3, 3, 140, 190, 64, 64}).dropout(0.2, 1234, 77).build();
  expect_matches_reference(pool, p);
}

TEST_F(FwdSimtGpu, SinkLogit) {
  TensorPool pool(8);
  // With a causal mask whose first rows see no key, only the sink logit is in their denominator.
  expect_matches_reference(pool, batch(pool, {2, 3, 3, 100, 80, 64, 64})
                                     .sink_logits(pool.uniform(DType::fp32, {3}, -1, 2))
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(FwdSimtGpu, GroupModeWithEmptySequence) {
  TensorPool pool(9);
  expect_matches_reference(
      pool, testing::group_problem(pool, Family::fwd, DType::fp32, {0, 5, 5, 135, 205},
                                   {0, 9, 13, 213, 213}, 4, 2, 64, 64)
                .causal(MaskAlign::top_left)
                .build());
}

TEST_F(FwdSimtGpu, PerBatchKeyLengths) {
  TensorPool pool(10);
  expect_matches_reference(
      pool, batch(pool, {3, 2, 2, 70, 200, 64, 64}).key_lengths({200, 33, 0}).build());
}

TEST_F(FwdSimtGpu, GqaSevenToOne) {
  TensorPool pool(11);
  expect_matches_reference(pool, batch(pool, {1, 14, 2, 77, 150, 64, 64}).build());
}

TEST_F(FwdSimtGpu, PaddedHeadDims) {
  TensorPool pool(12);
  expect_matches_reference(pool, batch(pool, {2, 2, 2, 130, 130, 72, 72}).build());
  expect_matches_reference(pool, batch(pool, {1, 2, 1, 130, 100, 192, 128}).causal().build());
  expect_matches_reference(pool, batch(pool, {1, 2, 2, 40, 60, 5, 3}).build());
}

TEST_F(FwdSimtGpu, LayoutsAndStrides) {
  TensorPool pool(13);
  expect_matches_reference(pool, batch(pool, {2, 3, 3, 90, 130, 64, 64}, QkvLayout::bhsd).build());
  // Strides that are no multiple of 16 bytes, for every tensor.
  expect_matches_reference(pool, batch(pool, {2, 2, 1, 50, 70, 40, 24}, QkvLayout::padded).build());
}

TEST_F(FwdSimtGpu, ShortSequences) {
  TensorPool pool(14);
  expect_matches_reference(pool, batch(pool, {2, 14, 2, 1, 1000, 128, 128}).build());
  expect_matches_reference(pool, batch(pool, {1, 2, 2, 17, 17, 64, 64}).causal().build());
}

}  // namespace
}  // namespace tilefmha
