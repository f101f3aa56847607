// Test support: the GPU backward through the public Engine, restricted to one bwd_dq_dk_dv
// pipeline, against the CPU reference (reference::backward) on fresh random inputs, gradients
// poisoned (NaN bytes) before each run. The fixture of tests/bwd_sm80_gpu_test.cpp and
// tests/bwd_sm90_gpu_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "jit/module.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/tolerance.hpp"
#include "support/backward_views.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_availability.hpp"
#include "support/gpu_problem.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::testing {

// A host view's bytes in device memory (the view re-pointed there); outputs start poisoned.
struct DeviceView {
  std::unique_ptr<jit::DeviceBuffer> buffer;
  TensorView view;
};

inline DeviceView to_device(const TensorView& host, bool poison) {
  const int64_t bytes = host.extent() * dtype_size(host.dtype);
  DeviceView out{std::make_unique<jit::DeviceBuffer>(std::max<int64_t>(bytes, 1)), host};
  if (poison)
    out.buffer->fill_bytes(runtime::kPoisonByte);
  else if (bytes > 0)
    out.buffer->copy_from_host(std::span(static_cast<const std::byte*>(host.data), bytes));
  out.view.data = reinterpret_cast<void*>(out.buffer->address());
  out.view.space = MemorySpace::device;
  return out;
}

inline void download(const DeviceView& device, const TensorView& host) {
  const int64_t bytes = host.extent() * dtype_size(host.dtype);
  if (bytes > 0) device.buffer->copy_to_host(std::span(static_cast<std::byte*>(host.data), bytes));
}

// A forward problem's host inputs, its reference O and LSE, a random dO, and the reference's
// gradients: everything the GPU backward needs and must reproduce.
struct BackwardCase {
  Problem host;  // family bwd_dq_dk_dv, host views; dq/dk/dv hold the reference's gradients
  TensorView gpu_dq, gpu_dk, gpu_dv;  // host buffers the GPU results are downloaded into
  TensorView gpu_dbias;               // and dBias's, when the case has one
  TensorView gpu_dsink;               // and dSink's, when the case asks for it
};

// No dBias unless `dbias` names its dtype; no dSink unless `dsink` (the forward then needs sink
// logits).
inline BackwardCase make_case(TensorPool& pool, Problem forward, bool deterministic,
                              std::optional<DType> dbias = std::nullopt, bool dsink = false) {
  reference::forward(forward);
  BackwardCase c;
  Problem& p = c.host;
  p = forward;
  p.family = Family::bwd_dq_dk_dv;
  p.bwd.deterministic = deterministic;
  const auto& o = forward.o.shape;
  p.bwd.d_o = pool.uniform(forward.out_dtype, {o[0], o[1], o[2], o[3]}, -1, 1);
  p.bwd.dq = like(pool, forward.q);
  p.bwd.dk = like(pool, forward.k);
  p.bwd.dv = like(pool, forward.v);
  if (dbias) p.bwd.dbias = dbias_like(pool, forward.bias, *dbias);
  if (dsink) p.bwd.dsink = pool.filled(DType::fp32, {forward.nhead_q}, kUnwritten);
  Problem with_scratch = p;
  with_scratch.bwd.d = pool.filled(
      DType::fp32, {forward.lse.shape[0], forward.lse.shape[1], forward.lse.shape[2]}, kUnwritten);
  with_scratch.bwd.dq_acc = pool.filled(
      DType::fp32, {forward.q.shape[0], forward.q.shape[1], forward.q.shape[2], forward.q.shape[3]},
      kUnwritten);
  reference::backward(with_scratch);
  c.gpu_dq = like(pool, p.bwd.dq);
  c.gpu_dk = like(pool, p.bwd.dk);
  c.gpu_dv = like(pool, p.bwd.dv);
  if (dbias) c.gpu_dbias = dbias_like(pool, forward.bias, *dbias);
  if (dsink) c.gpu_dsink = pool.filled(DType::fp32, {forward.nhead_q}, kUnwritten);
  return c;
}

// Gradients sum many products: the bound scales with the largest reference magnitude.
inline int64_t mismatches(const char* name, const TensorView& expected, const TensorView& actual,
                          DType dtype) {
  double largest = 0;
  int64_t rows = 0;
  for_each_element(expected, [&](int64_t, int64_t offset) {
    largest = std::max(largest, std::fabs(numeric::load(expected.data, expected.dtype, offset)));
    ++rows;
  });
  const runtime::Tolerance tolerance = runtime::gradient_tolerance(dtype, largest);
  const runtime::Agreement agreement = compare(expected, actual, tolerance.atol, tolerance.rtol);
  std::printf("    %s: max abs err %.3e (largest %.3e) over %lld, %lld mismatches\n", name,
              agreement.max_abs_error, largest, static_cast<long long>(agreement.compared),
              static_cast<long long>(agreement.mismatches));
  return agreement.mismatches + (agreement.compared == rows ? 0 : 1);
}

template <Pipeline kPipeline>
class BackwardGpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!gpu_skip_reason().empty()) return;
    // One pipeline's kernels only: without the restriction an sm_90 device would plan sm90_ws
    // kernels wherever they apply, and the portable ones would go untested there.
    EngineOptions options;
    options.pipeline = kPipeline;
    engine_ = std::make_unique<Engine>(options);
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void SetUp() override {
    if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    context_ = std::make_unique<jit::GpuContext>(0);
    if (kPipeline == Pipeline::sm90_ws && context_->compute_capability() != 90)
      GTEST_SKIP() << "sm90_ws needs an sm_90 GPU";
  }

  // Runs the GPU backward of `c` (fresh device copies, poisoned gradients) and downloads the
  // gradients into c.gpu_*; returns the plan's stage count.
  int64_t run_on_gpu(BackwardCase& c) {
    const Problem& h = c.host;
    std::vector<DeviceView> inputs;
    Problem d = h;
    for (TensorView* view :
         {&d.q, &d.k, &d.v, &d.o, &d.lse, &d.sink_logits, &d.bias, &d.alibi_slopes, &d.bwd.d_o}) {
      if (view->empty()) continue;
      inputs.push_back(to_device(*view, false));
      *view = inputs.back().view;
    }
    DeviceView dq = to_device(h.bwd.dq, true), dk = to_device(h.bwd.dk, true),
               dv = to_device(h.bwd.dv, true);
    d.bwd.dq = dq.view;
    d.bwd.dk = dk.view;
    d.bwd.dv = dv.view;
    std::optional<DeviceView> dbias, dsink;
    if (!h.bwd.dbias.empty()) {
      dbias = to_device(h.bwd.dbias, true);
      d.bwd.dbias = dbias->view;
    }
    if (!h.bwd.dsink.empty()) {
      dsink = to_device(h.bwd.dsink, true);
      d.bwd.dsink = dsink->view;
    }
    const EnginePlan plan = engine_->plan(d);
    std::printf("  %s\n%s", d.describe().c_str(), plan.explanation().c_str());
    engine_->run(plan, d);
    context_->synchronize();
    download(dq, c.gpu_dq);
    download(dk, c.gpu_dk);
    download(dv, c.gpu_dv);
    if (dbias) download(*dbias, c.gpu_dbias);
    if (dsink) download(*dsink, c.gpu_dsink);
    return plan.num_stages();
  }

  void expect_matches_reference(TensorPool& pool, Problem forward, bool deterministic = false,
                                std::optional<DType> dbias = std::nullopt, bool dsink = false) {
    BackwardCase c = make_case(pool, std::move(forward), deterministic, dbias, dsink);
    EXPECT_EQ(run_on_gpu(c), 3);
    const DType dtype = c.host.dtype;
    EXPECT_EQ(mismatches("dq", c.host.bwd.dq, c.gpu_dq, dtype), 0);
    EXPECT_EQ(mismatches("dk", c.host.bwd.dk, c.gpu_dk, dtype), 0);
    EXPECT_EQ(mismatches("dv", c.host.bwd.dv, c.gpu_dv, dtype), 0);
    // dBias is computed in the inputs' precision whatever its storage dtype.
    if (dbias) {
      EXPECT_EQ(mismatches("dbias", c.host.bwd.dbias, c.gpu_dbias, dtype), 0);
    }
    if (dsink) expect_dsink_matches(c);
  }

  // dSink sums fp32 terms of the same stored O, dO and LSE the reference reads (no 16-bit
  // rounding in between), so it is held to the fp32 bound; a vanishing dSink would match a
  // kernel that never wrote the sink's terms.
  static void expect_dsink_matches(const BackwardCase& c) {
    EXPECT_EQ(mismatches("dsink", c.host.bwd.dsink, c.gpu_dsink, DType::fp32), 0);
    double largest = 0;
    for (int64_t h = 0; h < c.host.nhead_q; ++h)
      largest = std::max(largest, std::fabs(numeric::load(c.host.bwd.dsink, {h})));
    EXPECT_GT(largest, 1e-3) << "the reference dSink vanishes: the case tests nothing";
  }

  // Matches the reference, then three more runs give the same bytes.
  void expect_bit_identical_repeats(BackwardCase& c) {
    run_on_gpu(c);
    const DType dtype = c.host.dtype;
    EXPECT_EQ(mismatches("dq", c.host.bwd.dq, c.gpu_dq, dtype), 0);
    EXPECT_EQ(mismatches("dk", c.host.bwd.dk, c.gpu_dk, dtype), 0);
    EXPECT_EQ(mismatches("dv", c.host.bwd.dv, c.gpu_dv, dtype), 0);
    auto bytes = [](const TensorView& v) {
      const auto* begin = static_cast<const std::byte*>(v.data);
      return std::vector<std::byte>(begin, begin + v.extent() * dtype_size(v.dtype));
    };
    const bool dsink = !c.host.bwd.dsink.empty();
    if (dsink) expect_dsink_matches(c);
    const auto first_dq = bytes(c.gpu_dq), first_dk = bytes(c.gpu_dk), first_dv = bytes(c.gpu_dv);
    const auto first_dsink = dsink ? bytes(c.gpu_dsink) : std::vector<std::byte>{};
    for (int repeat = 0; repeat < 3; ++repeat) {
      run_on_gpu(c);
      EXPECT_EQ(bytes(c.gpu_dq), first_dq) << "repeat " << repeat;
      EXPECT_EQ(bytes(c.gpu_dk), first_dk) << "repeat " << repeat;
      EXPECT_EQ(bytes(c.gpu_dv), first_dv) << "repeat " << repeat;
      if (dsink) EXPECT_EQ(bytes(c.gpu_dsink), first_dsink) << "repeat " << repeat;
    }
  }

  // dSink has no atomics in either mode: outside deterministic mode too, repeats give its bytes
  // again (dQ may differ there; it is not compared).
  void expect_dsink_repeats(BackwardCase& c) {
    run_on_gpu(c);
    expect_dsink_matches(c);
    const auto* data = static_cast<const std::byte*>(c.gpu_dsink.data);
    const std::vector<std::byte> first(data, data + c.gpu_dsink.extent() * 4);
    for (int repeat = 0; repeat < 3; ++repeat) {
      run_on_gpu(c);
      EXPECT_EQ(std::vector<std::byte>(data, data + c.gpu_dsink.extent() * 4), first)
          << "repeat " << repeat;
    }
  }

  // The dSink cases both pipelines run (`hdim`: a head dim the pipeline's fast kernel takes).
  // dSink (bwd.dsink) is reduced from bwd_dot_do_o's per-CTA partials by bwd_convert_dq around
  // the pipeline's dq_dk_dv. Sinks in [1, 4] give the sink a share of each row's softmax
  // comparable to the keys', so dSink is far from 0.
  static TensorView sinks(TensorPool& pool, int64_t heads) {
    return pool.uniform(DType::fp32, {heads}, 1, 4);
  }
  // Bottom-right causal with more queries than keys: the first rows see only the sink (O = 0,
  // so their terms are 0 however large exp(sink - lse) = 1 is), GQA 4:1.
  void dsink_causal_gqa_rows_only_the_sink_sees(uint64_t seed, int64_t hdim) {
    TensorPool pool(seed);
    expect_matches_reference(
        pool,
        batch_problem(pool, Family::fwd, DType::bf16, {2, 8, 2, 350, 200, hdim, hdim})
            .causal(MaskAlign::bottom_right)
            .sink_logits(sinks(pool, 8))
            .build(),
        false, std::nullopt, true);
  }
  // Query lengths 40, 0, 330, 1 over key lengths 35, 20, 400, 0: an empty sequence and one
  // whose query sees no key.
  void dsink_varlen_with_empty_sequences(uint64_t seed) {
    TensorPool pool(seed);
    expect_matches_reference(pool,
                             group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 370, 371},
                                           {0, 35, 55, 455, 455}, 8, 2, 128, 128)
                                 .causal(MaskAlign::bottom_right)
                                 .sink_logits(sinks(pool, 8))
                                 .build(),
                             false, std::nullopt, true);
  }
  // More query heads (96) than bwd_dot_do_o has rows per CTA (64): each CTA holds some heads
  // only and writes zeros for the others.
  void dsink_more_heads_than_rows_per_cta(uint64_t seed, int64_t hdim) {
    TensorPool pool(seed);
    expect_matches_reference(
        pool,
        batch_problem(pool, Family::fwd, DType::bf16, {2, 96, 8, 70, 90, hdim, hdim})
            .sink_logits(sinks(pool, 96))
            .build(),
        false, std::nullopt, true);
  }
  void dsink_deterministic_repeats_are_bit_identical(uint64_t seed) {
    TensorPool pool(seed);
    BackwardCase c =
        make_case(pool,
                  batch_problem(pool, Family::fwd, DType::bf16, {2, 8, 2, 377, 600, 128, 128})
                      .causal()
                      .sink_logits(sinks(pool, 8))
                      .build(),
                  true, std::nullopt, true);
    expect_bit_identical_repeats(c);
  }
  void dsink_repeats_are_bit_identical_outside_deterministic_mode(uint64_t seed) {
    TensorPool pool(seed);
    BackwardCase c = make_case(pool,
                               group_problem(pool, Family::fwd, DType::bf16, {0, 300, 300, 700},
                                             {0, 260, 400, 900}, 4, 1, 64, 64)
                                   .sink_logits(sinks(pool, 4))
                                   .build(),
                               false, std::nullopt, true);
    expect_dsink_repeats(c);
  }

  static inline std::unique_ptr<Engine> engine_;
  std::unique_ptr<jit::GpuContext> context_;
};

inline ProblemBuilder batch_backward(TensorPool& pool, DType dtype, Dims d) {
  return batch_problem(pool, Family::fwd, dtype, d);
}

}  // namespace tilefmha::testing
