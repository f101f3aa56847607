// The public Engine on a GPU, end to end: plans with workspace and launch-only runs. Host index
// vectors are uploaded asynchronously into the plan's workspace (no synchronize), device index
// arrays are read where they are, a run captured in a CUDA graph replays with new lengths, and
// eight threads plan and run at once on a cold kernel cache. Every output is compared with the
// CPU reference on fresh random inputs, outputs poisoned (NaN) before each run. Skipped without
// a GPU, driver or NVRTC.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench/matrix.hpp"
#include "core/numeric.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/timing.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_problem.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/merge_states.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

using testing::gpu_skip_reason;
using testing::TensorPool;

// O and LSE of `device_out` (downloaded into `host`'s views) against the reference's for
// `host`'s inputs; returns the number of mismatching elements.
int64_t mismatches_against_reference(TensorPool& pool, const Problem& host) {
  Problem on_cpu = host;
  const auto& n = host.o.shape;
  on_cpu.o = pool.filled(host.o.dtype, {n[0], n[1], n[2], n[3]}, testing::kUnwritten);
  if (host.return_lse)
    on_cpu.lse = pool.filled(DType::fp32, {host.lse.shape[0], host.lse.shape[1], host.lse.shape[2]},
                             testing::kUnwritten);
  reference::forward(on_cpu);
  const runtime::Tolerance tolerance = runtime::output_tolerance(host.out_dtype);
  const runtime::Agreement o = testing::compare(on_cpu.o, host.o, tolerance.atol, tolerance.rtol);
  std::printf("  %-64s O max abs err %.2e over %lld\n", host.describe().c_str(), o.max_abs_error,
              static_cast<long long>(o.compared));
  int64_t bad = o.mismatches + (o.compared == host.o.numel() ? 0 : 1);
  if (host.return_lse) {
    const runtime::Agreement lse = testing::compare(
        on_cpu.lse, host.lse, runtime::kLseTolerance.atol, runtime::kLseTolerance.rtol);
    bad += lse.mismatches;
  }
  return bad;
}

// A varlen problem (one empty sequence, one single-token one) with GQA and bottom-right causal.
Problem varlen_problem(TensorPool& pool, std::vector<int64_t> seqstart_q,
                       std::vector<int64_t> seqstart_k) {
  return testing::group_problem(pool, Family::fwd, DType::bf16, std::move(seqstart_q),
                                std::move(seqstart_k), 8, 2, 128, 128)
      .causal(MaskAlign::bottom_right)
      .splits(1)
      .build();
}

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> sums = {0};
  for (int64_t length : lengths) sums.push_back(sums.back() + length);
  return sums;
}

// int64 values in device memory.
std::unique_ptr<jit::DeviceBuffer> upload(const std::vector<int64_t>& values) {
  auto buffer = std::make_unique<jit::DeviceBuffer>(static_cast<int64_t>(values.size() * 8));
  buffer->copy_from_host(std::as_bytes(std::span(values)));
  return buffer;
}

// A host view's bytes in device memory, the view re-pointed there.
struct DeviceView {
  std::unique_ptr<jit::DeviceBuffer> buffer;
  TensorView view;
};
DeviceView upload_view(const TensorView& host) {
  const int64_t bytes = host.extent() * dtype_size(host.dtype);
  DeviceView out{std::make_unique<jit::DeviceBuffer>(bytes), host};
  out.buffer->copy_from_host(std::span(static_cast<const std::byte*>(host.data), bytes));
  out.view.data = reinterpret_cast<void*>(out.buffer->address());
  out.view.space = MemorySpace::device;
  return out;
}

class EngineGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (gpu_skip_reason().empty()) engine_ = std::make_unique<Engine>();
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void SetUp() override {
    if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    context_ = std::make_unique<jit::GpuContext>(0);
  }

  static std::unique_ptr<Engine> engine_;
  std::unique_ptr<jit::GpuContext> context_;
};

std::unique_ptr<Engine> EngineGpu::engine_;

// Two runs of one plan with different host seqstarts queued back to back on a non-blocking
// stream: each upload lands in the workspace behind the previous run (stream order), and
// nothing waits on the host until the test downloads.
TEST_F(EngineGpu, HostIndexVectorsUploadAsynchronously) {
  TensorPool pool(11);
  const Problem first =
      varlen_problem(pool, prefix_sums({0, 37, 263, 1, 254}), prefix_sums({5, 300, 263, 129, 254}));
  const Problem second =
      varlen_problem(pool, prefix_sums({263, 1, 0, 254, 37}), prefix_sums({263, 129, 5, 254, 300}));
  runtime::DeviceMirror a(first), b(second);
  const EnginePlan plan = engine_->plan(a.device_problem());
  EXPECT_EQ(engine_->plan(b.device_problem()).explanation(), plan.explanation());
  EXPECT_GT(plan.workspace_bytes(), 0);
  jit::Stream stream;
  engine_->run(plan, a.device_problem(), stream.handle());
  engine_->run(plan, b.device_problem(), stream.handle());
  stream.synchronize();
  a.copy_outputs_to(first);
  b.copy_outputs_to(second);
  EXPECT_EQ(mismatches_against_reference(pool, first), 0) << plan.explanation();
  EXPECT_EQ(mismatches_against_reference(pool, second), 0);
}

// Device prefix sums and key lengths, as serving engines keep them: the caller gives batch and
// the longest lengths; the plan needs no workspace for them. A CUDA graph of the run then
// replays with other lengths written into the same device arrays.
TEST_F(EngineGpu, DeviceIndexArraysAndGraphReplayWithNewLengths) {
  TensorPool pool(12);
  const std::vector<int64_t> lengths_q = {0, 37, 263, 1, 254};
  const std::vector<int64_t> lengths_k = {5, 300, 263, 129, 254};
  const Problem host = varlen_problem(pool, prefix_sums(lengths_q), prefix_sums(lengths_k));
  runtime::DeviceMirror mirror(host);
  auto seqstart_q = upload(host.seqstart_q);
  auto seqstart_k = upload(host.seqstart_k);
  Problem device = mirror.device_problem();
  device.seqstart_q.clear();
  device.seqstart_k.clear();
  device.device_indices.seqstart_q = reinterpret_cast<const int64_t*>(seqstart_q->address());
  device.device_indices.seqstart_k = reinterpret_cast<const int64_t*>(seqstart_k->address());
  const EnginePlan plan = engine_->plan(device);
  EXPECT_EQ(plan.workspace_bytes(), 0) << "device arrays need no upload space";

  jit::Stream stream;
  const jit::CudaDriverApi& api = jit::cuda_driver();
  engine_->run(plan, device, stream.handle());  // loads nothing new during capture
  stream.synchronize();
  jit::CUgraph graph = nullptr;
  jit::CUgraphExec exec = nullptr;
  jit::check_cuda(api.stream_begin_capture(stream.handle(), 2), "cuStreamBeginCapture");
  engine_->run(plan, device, stream.handle());
  jit::check_cuda(api.stream_end_capture(stream.handle(), &graph), "cuStreamEndCapture");
  jit::check_cuda(api.graph_instantiate(&exec, graph, 0), "cuGraphInstantiate");

  // Replay 1: the captured lengths, O poisoned first.
  mirror.poison_outputs();
  jit::check_cuda(api.graph_launch(exec, stream.handle()), "cuGraphLaunch");
  stream.synchronize();
  mirror.copy_outputs_to(host);
  EXPECT_EQ(mismatches_against_reference(pool, host), 0);

  // Replay 2: the same tokens regrouped (same totals and longest lengths) by new prefix sums
  // written into the captured arrays.
  Problem regrouped = host;
  regrouped.seqstart_q = prefix_sums({263, 1, 0, 254, 37});
  regrouped.seqstart_k = prefix_sums({263, 129, 5, 254, 300});
  seqstart_q->copy_from_host(std::as_bytes(std::span(regrouped.seqstart_q)));
  seqstart_k->copy_from_host(std::as_bytes(std::span(regrouped.seqstart_k)));
  mirror.poison_outputs();
  jit::check_cuda(api.graph_launch(exec, stream.handle()), "cuGraphLaunch");
  stream.synchronize();
  mirror.copy_outputs_to(regrouped);
  EXPECT_EQ(mismatches_against_reference(pool, regrouped), 0);
  api.graph_exec_destroy(exec);
  api.graph_destroy(graph);
}

// Eight threads plan and run four shapes (two threads each) at once through one engine whose
// kernel cache starts empty: each kernel builds once, no module is unloaded under a launch,
// and every output matches the reference.
TEST_F(EngineGpu, ConcurrentPlanAndRunOnAColdCache) {
  const auto cache = std::filesystem::temp_directory_path() /
                     ("tilefmha_engine_cold_" + std::to_string(::getpid()));
  std::filesystem::remove_all(cache);
  EngineOptions options;
  options.cache_dir = cache.string();
  Engine cold(options);
  const testing::Dims shapes[] = {{2, 8, 8, 300, 300, 128, 128},
                                  {1, 8, 2, 129, 700, 64, 64},
                                  {3, 4, 4, 64, 64, 256, 256},
                                  {2, 16, 2, 1, 1000, 128, 128}};
  std::vector<int64_t> bad(8, -1);
  std::vector<std::string> errors(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      try {
        jit::GpuContext context(0);
        TensorPool pool(100 + t);
        const Problem host =
            testing::batch_problem(pool, Family::fwd, DType::bf16, shapes[t % 4]).causal().build();
        runtime::DeviceMirror mirror(host);
        jit::Stream stream;
        cold.run(mirror.device_problem(), stream.handle());
        stream.synchronize();
        mirror.copy_outputs_to(host);
        bad[t] = mismatches_against_reference(pool, host);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_EQ(bad[t], 0) << "thread " << t;
  }
  std::filesystem::remove_all(cache);
}

// Runs `host` through `engine` (device copies, outputs poisoned) and compares with the reference.
int64_t run_and_compare(Engine& engine, TensorPool& pool, const Problem& host,
                        EnginePlan* planned = nullptr) {
  runtime::DeviceMirror mirror(host);
  const EnginePlan plan = engine.plan(mirror.device_problem());
  if (planned) *planned = plan;
  jit::Stream stream;
  engine.run(plan, mirror.device_problem(), stream.handle());
  stream.synchronize();
  mirror.copy_outputs_to(host);
  std::printf("%s", plan.explanation().c_str());
  return mismatches_against_reference(pool, host);
}

// The smoke tier's split-KV shapes (data/matrix/smoke.json, group decode_splitkv), each run as a
// forward problem with the tier's split count forced: split-KV then combine, against the
// reference forward.
TEST_F(EngineGpu, SmokeTierSplitKvShapesMatchTheReference) {
  int checked = 0;
  for (const bench::MatrixShape& shape : bench::load_matrix_tier("smoke")) {
    if (shape.family != Family::fwd_splitkv) continue;
    SCOPED_TRACE(shape.label());
    TensorPool pool(200 + checked);
    const testing::Dims dims{shape.batch,    shape.nhead_q, shape.nhead_k, shape.seqlen_q,
                             shape.seqlen_k, shape.hdim_q,  shape.hdim_v};
    const Problem host = testing::batch_problem(pool, Family::fwd, shape.dtype, dims)
                             .splits(shape.num_splits)
                             .build();
    EnginePlan plan;
    EXPECT_EQ(run_and_compare(*engine_, pool, host, &plan), 0);
    EXPECT_EQ(plan.num_splits(), shape.num_splits);
    EXPECT_EQ(plan.num_stages(), plan.splits_merged_in_cluster() ? 1 : 2);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// Splits chosen by the engine for decode (few tiles, long keys), and forced ones with every
// feature that makes sense with splits: masks, soft cap, ALiBi, the sink logit (added once, in
// the combine), GQA, varlen with host seqstarts (uploads and partials share the workspace) and
// per-batch key lengths.
TEST_F(EngineGpu, SplitKvPlansMatchTheReference) {
  TensorPool pool(300);
  const auto slopes = pool.uniform(DType::fp32, {32}, 0.01, 0.2);
  const auto sinks = pool.uniform(DType::fp32, {32}, -1, 2);
  // Decode: 8 tiles of packed GQA for 132 SMs; the engine splits on its own.
  {
    const Problem host =
        testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 32, 8, 1, 8192, 128, 128})
            .build();
    EnginePlan plan;
    EXPECT_EQ(run_and_compare(*engine_, pool, host, &plan), 0);
    EXPECT_GT(plan.num_splits(), 1) << plan.explanation();
  }
  // Forced splits over the features.
  std::vector<Problem> problems;
  problems.push_back(
      testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 32, 8, 16, 3000, 64, 64})
          .causal(MaskAlign::bottom_right)
          .sink_logits(sinks)
          .splits(5)
          .build());
  problems.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 32, 32, 100, 2000, 128, 128})
          .window(300, 0, MaskAlign::bottom_right)
          .sink_tokens(4)
          .softcap(20)
          .alibi(slopes)
          .splits(3)
          .build());
  problems.push_back(varlen_problem(pool, prefix_sums({0, 37, 263, 1, 254}),
                                    prefix_sums({5, 3000, 263, 1290, 254})));
  problems.back().split.num_splits = 4;
  problems.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {3, 32, 8, 1, 4096, 128, 128})
          .key_lengths({4096, 0, 1500})
          .splits(6)
          .build());
  for (const Problem& host : problems) {
    EnginePlan plan;
    EXPECT_EQ(run_and_compare(*engine_, pool, host, &plan), 0);
    EXPECT_EQ(plan.num_splits(), host.split.num_splits) << plan.explanation();
  }
}

// Split plans whose clusters merge the splits (no combine stage): an automatic b=1 decode, and
// forced counts of 2 to 16 over short splits (up to kClusterMergeMaxChunkKeys keys) with the LSE
// output, the sink logit (added once, in the merge), varlen with an empty sequence, per-batch key
// lengths (a sequence with none: O = 0, LSE = -inf), fp16, head dims 64 and 256, unpacked heads,
// and clusters past the portable 8 CTAs. Longer splits keep split-KV then combine.
TEST_F(EngineGpu, SplitsMergedInClustersMatchTheReference) {
  TensorPool pool(350);
  const auto sinks = pool.uniform(DType::fp32, {32}, -1, 2);
  std::vector<Problem> merged;
  merged.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 32, 8, 1, 1024, 128, 128})
          .build());
  merged.push_back(
      testing::batch_problem(pool, Family::fwd, DType::fp16, {1, 32, 8, 3, 2000, 64, 64})
          .causal(MaskAlign::bottom_right)
          .sink_logits(sinks)
          .splits(8)
          .build());
  merged.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 16, 16, 1, 1000, 256, 256})
          .sink_logits(pool.uniform(DType::fp32, {16}, -1, 2))
          .splits(2)
          .build());
  merged.push_back(
      varlen_problem(pool, prefix_sums({0, 37, 1, 20}), prefix_sums({5, 900, 290, 254})));
  merged.back().split.num_splits = 2;
  merged.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {3, 32, 8, 1, 1024, 128, 128})
          .key_lengths({1024, 0, 700})
          .splits(3)
          .build());
  // Past the portable cluster size: two batches of partial rows per merged row.
  merged.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 8, 2, 1, 2048, 128, 128})
          .splits(16)
          .build());
  merged.push_back(
      testing::batch_problem(pool, Family::fwd, DType::fp16, {1, 12, 2, 1, 3000, 64, 64})
          .sink_logits(pool.uniform(DType::fp32, {12}, -1, 2))
          .splits(12)
          .build());
  // Clusters few enough for one wave: the engine otherwise falls back to split-KV + combine.
  for (const Problem& host : merged) {
    EnginePlan plan;
    EXPECT_EQ(run_and_compare(*engine_, pool, host, &plan), 0);
    EXPECT_TRUE(plan.splits_merged_in_cluster()) << plan.explanation();
    EXPECT_EQ(plan.num_stages(), 1) << plan.explanation();
  }
  // Splits longer than the merge's limit keep the combine.
  const Problem wide =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 32, 8, 1, 16384, 128, 128})
          .splits(16)
          .build();
  EnginePlan plan;
  EXPECT_EQ(run_and_compare(*engine_, pool, wide, &plan), 0);
  EXPECT_FALSE(plan.splits_merged_in_cluster());
  EXPECT_EQ(plan.num_stages(), 2);
  // 8 clusters of 16 merge where the device holds them at once, else the combine runs: right
  // either way.
  const Problem decode =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 32, 8, 1, 8192, 128, 128}).build();
  EnginePlan automatic;
  EXPECT_EQ(run_and_compare(*engine_, pool, decode, &automatic), 0);
  std::printf("b1 32/8 d128 8k decode: %s\n", automatic.explanation().c_str());
}

// GQA groups that do not divide 64 pack into a 64-row tile of whole groups (28/4 heads: 9
// positions of 7 heads, 63 rows), the last rows unused: decode through split-KV (merged or not),
// and short causal rows in one pass, each against the reference with its LSE.
TEST_F(EngineGpu, PackedGroupsThatDoNotDivideTheTileMatchTheReference) {
  TensorPool pool(360);
  std::vector<Problem> problems;
  problems.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 28, 4, 1, 8192, 128, 128})
          .build());
  problems.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 28, 4, 1, 1024, 128, 128})
          .build());
  problems.push_back(
      testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 12, 2, 5, 700, 64, 64})
          .causal(MaskAlign::bottom_right)
          .splits(1)
          .build());
  problems.push_back(
      testing::batch_problem(pool, Family::fwd, DType::bf16, {3, 40, 8, 11, 2000, 128, 128})
          .causal(MaskAlign::bottom_right)
          .build());
  for (const Problem& host : problems) {
    EnginePlan plan;
    EXPECT_EQ(run_and_compare(*engine_, pool, host, &plan), 0);
    EXPECT_TRUE(plan.kernels().front().pack_gqa) << plan.explanation();
  }
}

// The portable pipeline's split-KV and the combine, selected by restricting the candidates.
TEST_F(EngineGpu, PortableSplitKvMatchesTheReference) {
  EngineOptions options;
  options.pipeline = Pipeline::sm80_mma;
  Engine portable(options);
  TensorPool pool(400);
  const Problem host =
      testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 16, 4, 3, 5000, 128, 128})
          .causal(MaskAlign::bottom_right)
          .splits(7)
          .build();
  EnginePlan plan;
  EXPECT_EQ(run_and_compare(portable, pool, host, &plan), 0);
  ASSERT_EQ(plan.num_stages(), 2);
  EXPECT_EQ(plan.kernels().front().pipeline, Pipeline::sm80_mma);
}

// merge_states on the GPU (the combine kernel on caller-given states) against the reference's
// merge: fp32 and bf16 states, a sink logit, and states that saw no key holding NaN.
TEST_F(EngineGpu, MergeStatesMatchesTheReference) {
  TensorPool pool(600);
  for (DType state_dtype : {DType::fp32, DType::bf16}) {
    const int64_t n = 5, batch = 3, heads = 8, seq = 37, dim = 128;
    MergeStates host;
    host.o_states = pool.uniform(state_dtype, {n, batch, heads, seq, dim}, -1, 1);
    host.lse_states = pool.uniform(DType::fp32, {n, batch, heads, seq}, -4, 4);
    for (int64_t h = 0; h < heads; ++h)  // state 1 of batch 0 saw no key
      for (int64_t i = 0; i < seq; ++i) {
        numeric::store(host.lse_states, {1, 0, h, i}, -INFINITY);
        for (int64_t d = 0; d < dim; ++d) numeric::store(host.o_states, {1, 0, h, i, d}, NAN);
      }
    host.o = pool.filled(DType::bf16, {batch, seq, heads, dim}, testing::kUnwritten);
    host.lse = pool.filled(DType::fp32, {batch, heads, seq}, testing::kUnwritten);
    host.sink_logits = pool.uniform(DType::fp32, {heads}, -1, 1);
    const Problem problem = merge_states_problem(host);
    runtime::DeviceMirror mirror(problem);
    // The mirror copies Q/K/V/O/LSE/bias/slopes/sinks; the states are inputs of their own.
    auto o_states = upload_view(host.o_states);
    auto lse_states = upload_view(host.lse_states);
    MergeStates device{o_states.view, lse_states.view, mirror.device_problem().o,
                       mirror.device_problem().lse, mirror.device_problem().sink_logits};
    jit::Stream stream;
    engine_->merge_states(device, stream.handle());
    stream.synchronize();
    mirror.copy_outputs_to(problem);

    MergeStates expected = host;
    expected.o = pool.filled(DType::bf16, {batch, seq, heads, dim}, testing::kUnwritten);
    expected.lse = pool.filled(DType::fp32, {batch, heads, seq}, testing::kUnwritten);
    reference::splitkv_combine(merge_states_problem(expected));
    const runtime::Tolerance tolerance = runtime::output_tolerance(DType::bf16);
    EXPECT_EQ(testing::compare(expected.o, host.o, tolerance.atol, tolerance.rtol).mismatches, 0);
    EXPECT_EQ(testing::compare(expected.lse, host.lse, runtime::kLseTolerance.atol,
                               runtime::kLseTolerance.rtol)
                  .mismatches,
              0);
  }
}

// Decode through the engine, split counts side by side (the engine's own choice first): GPU time
// per run (events, median of 30, inputs re-read from HBM after an L2 flush) and the K/V read
// rate, for tuning runtime/heuristics.cpp. Opt-in (TILEFMHA_ENGINE_BENCH=1); asserts no time.
TEST_F(EngineGpu, DecodeSplitThroughput) {
  if (std::getenv("TILEFMHA_ENGINE_BENCH") == nullptr)
    GTEST_SKIP() << "set TILEFMHA_ENGINE_BENCH=1";
  const testing::Dims shapes[] = {{1, 32, 8, 1, 1024, 128, 128},  {1, 32, 8, 1, 8192, 128, 128},
                                  {1, 32, 8, 1, 32768, 128, 128}, {1, 32, 8, 1, 131072, 128, 128},
                                  {1, 32, 8, 1, 8192, 64, 64},    {1, 32, 32, 1, 8192, 128, 128},
                                  {8, 32, 8, 1, 8192, 128, 128},  {8, 32, 8, 1, 8192, 64, 64},
                                  {32, 32, 8, 1, 8192, 64, 64},   {8, 32, 32, 16, 8192, 64, 64},
                                  {128, 32, 8, 1, 1024, 64, 64}};
  // 7 and 15: counts that leave splits empty at 1k and 8k keys (granules of 128), beside 8 and 16.
  const int64_t requests[] = {0, 1, 2, 4, 7, 8, 15, 16, 32, 64};
  std::printf("%-34s %6s %6s %9s %8s\n", "shape", "asked", "splits", "us", "GB/s");
  for (const testing::Dims& d : shapes) {
    TensorPool pool(500);
    for (int64_t request : requests) {
      if (request > 1 && d.seqlen_k / request < 128) continue;
      const Problem host =
          testing::batch_problem(pool, Family::fwd, DType::bf16, d).splits(request).build();
      runtime::DeviceMirror mirror(host);
      const EnginePlan plan = engine_->plan(mirror.device_problem());
      jit::Stream stream;
      runtime::L2Flusher flusher;
      const runtime::SampleStats stats = runtime::time_on_gpu(
          [&](jit::CUstream s) { engine_->run(plan, mirror.device_problem(), s); }, {3, 30, true},
          stream.handle(), &flusher);
      const double kv_bytes = 2.0 * d.batch * d.seqlen_k * d.nhead_k * d.hdim_q * 2;
      char label[64];
      std::snprintf(label, sizeof label, "b%lld h%lld/%lld d%lld sq%lld sk%lld",
                    static_cast<long long>(d.batch), static_cast<long long>(d.nhead_q),
                    static_cast<long long>(d.nhead_k), static_cast<long long>(d.hdim_q),
                    static_cast<long long>(d.seqlen_q), static_cast<long long>(d.seqlen_k));
      std::printf("%-34s %6lld %6lld %9.1f %8.0f\n", label, static_cast<long long>(request),
                  static_cast<long long>(plan.num_splits()), stats.median * 1e3,
                  kv_bytes / (stats.median * 1e-3) / 1e9);
    }
  }
}

}  // namespace
}  // namespace tilefmha
