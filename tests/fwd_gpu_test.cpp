// The sm80_mma forward kernel on a GPU: JIT-compiled from generated sources, run on device
// copies of random problems whose outputs are poisoned (all-ones bytes: NaN) beforehand, and
// compared with the CPU reference. Skipped without a GPU, driver or NVRTC.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codegen/generate.hpp"
#include "core/numeric.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/module.hpp"
#include "runtime/fwd_params.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_problem.hpp"
#include "support/kernel_configs.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

using testing::clobbered_padding;
using testing::compare;
using testing::DeviceProblem;
using testing::Dims;
using testing::gapped;
using testing::gpu_skip_reason;
using testing::QkvLayout;
using testing::sm80_fwd_config;
using testing::TensorPool;

struct Case {
  std::string name;
  KernelConfig config;
  std::function<Problem(TensorPool&)> make;
  bool check_padding = false;  // O lives in gapped memory whose gaps must stay untouched
};

ProblemBuilder batch(TensorPool& pool, DType dtype, Dims d, QkvLayout layout = QkvLayout::bshd) {
  return testing::batch_problem(pool, Family::fwd, dtype, d, layout);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  {
    KernelConfig c = sm80_fwd_config(DType::bf16, 128, 128, 128, 64, 8, 2);
    c.lse = true;
    all.push_back({"bf16_d128_plain", c, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 4, 4, 256, 256, 128, 128}).build();
                   }});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::fp16, 64, 64, 64, 128, 4, 3);
    c.mask = MaskKind::causal;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    c.lse = true;
    all.push_back({"fp16_d64_causal_ragged_bhsd", c, [](TensorPool& pool) {
                     return batch(pool, DType::fp16, {2, 3, 3, 100, 173, 64, 64}, QkvLayout::bhsd)
                         .causal()
                         .scale(0.6)
                         .build();
                   }});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::bf16, 72, 72, 128, 64, 4, 2);
    c.mask = MaskKind::causal;
    c.pad_seqlen_q = c.pad_seqlen_k = c.pad_hdim_q = c.pad_hdim_v = true;
    c.lse = true;
    all.push_back({"bf16_d72_causal_bottom_right_gqa", c, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 8, 2, 77, 200, 72, 72})
                         .causal(MaskAlign::bottom_right)
                         .scale(0.5)
                         .build();
                   }});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::bf16, 192, 128, 128, 32, 4, 2);
    c.mask = MaskKind::window;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    c.lse = true;
    all.push_back({"bf16_d192x128_window_sinks_gapped", c,
                   [](TensorPool& pool) {
                     const DType t = DType::bf16;
                     TensorView o = gapped(pool, t, 2, 300, 2, 128);
                     return ProblemBuilder(Family::fwd)
                         .dtype(t)
                         .shape(2, 2, 1, 300, 300, 192, 128)
                         .q(gapped(pool, t, 2, 300, 2, 192))
                         .k(gapped(pool, t, 2, 300, 1, 192))
                         .v(gapped(pool, t, 2, 300, 1, 128))
                         .o(o)
                         .lse(pool.filled(DType::fp32, {2, 2, 300}, NAN))
                         .window(40, 8, MaskAlign::bottom_right)
                         .sink_tokens(5)
                         .scale(0.3)
                         .build();
                   },
                   true});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::fp16, 128, 128, 64, 64, 4, 2);
    c.mode = Mode::group;
    c.mask = MaskKind::causal;
    c.bias = BiasKind::alibi;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    c.lse = true;
    all.push_back({"fp16_group_alibi_causal_bottom_right", c, [](TensorPool& pool) {
                     // Query lengths 50, 0, 130, 1 over key lengths 64, 36, 100, 170: the third
                     // has 30 rows that see no key (O = 0, LSE = -inf).
                     return testing::group_problem(pool, Family::fwd, DType::fp16,
                                                   {0, 50, 50, 180, 181}, {0, 64, 100, 200, 370}, 4,
                                                   2, 128, 128)
                         .causal(MaskAlign::bottom_right)
                         .alibi(pool.uniform(DType::fp32, {4}, 0.01, 0.3))
                         .build();
                   }});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::bf16, 32, 32, 64, 32, 4, 2);
    c.bias = BiasKind::elementwise;
    c.softcap = true;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    all.push_back({"bf16_d32_fp32_bias_softcap", c, [](TensorPool& pool) {
                     // One bias for every sequence (batch stride 0).
                     TensorView bias = pool.uniform(DType::fp32, {1, 2, 130, 90}, -2, 2);
                     bias.shape[0] = 2;
                     bias.stride[0] = 0;
                     Dims d{2, 2, 2, 130, 90, 32, 32};
                     ProblemBuilder b = batch(pool, DType::bf16, d);
                     b.scale(1.0).softcap(3.0).bias(bias);
                     Problem p = b.build();
                     p.return_lse = false;
                     p.lse = {};
                     return p;
                   }});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::bf16, 256, 256, 64, 32, 4, 2);
    c.dropout = true;
    c.sink_logit = true;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    c.lse = true;
    all.push_back({"bf16_d256_dropout_sink_logit_key_lengths", c, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {3, 2, 2, 64, 150, 256, 256})
                         .key_lengths({150, 7, 0})
                         .dropout(0.25, 0x1234567890ABCDEFull, 77)
                         .sink_logits(pool.uniform(DType::fp32, {2}, -1, 2))
                         .build();
                   }});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::fp16, 160, 160, 128, 64, 8, 3);
    c.mask = MaskKind::window;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    c.lse = true;
    all.push_back({"fp16_d160_window_mqa", c, [](TensorPool& pool) {
                     return batch(pool, DType::fp16, {2, 4, 1, 200, 200, 160, 160})
                         .window(16, 4)
                         .scale(0.4)
                         .build();
                   }});
  }
  {
    // block_n 48: the tile copy takes its irregular path (192 chunks a panel, 128 threads).
    KernelConfig c = sm80_fwd_config(DType::bf16, 96, 96, 64, 48, 4, 2);
    c.mask = MaskKind::window;
    c.bias = BiasKind::elementwise;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    c.lse = true;
    all.push_back({"bf16_d96_bf16_bias_right_window", c, [](TensorPool& pool) {
                     // One bias row block for every sequence and head.
                     TensorView bias = pool.uniform(DType::bf16, {1, 1, 65, 129}, -1, 1);
                     bias.shape[0] = 2;
                     bias.shape[1] = 2;
                     bias.stride[0] = bias.stride[1] = 0;
                     return batch(pool, DType::bf16, {2, 2, 2, 65, 129, 96, 96})
                         .window(-1, 20)
                         .bias(bias)
                         .build();
                   }});
  }
  {
    KernelConfig c = sm80_fwd_config(DType::fp16, 128, 128, 128, 64, 8, 2);
    c.bias = BiasKind::alibi;
    c.lse = true;
    all.push_back({"fp16_d128_alibi_per_sequence", c, [](TensorPool& pool) {
                     return batch(pool, DType::fp16, {2, 2, 2, 128, 192, 128, 128})
                         .alibi(pool.uniform(DType::fp32, {2, 2}, 0.01, 0.5))
                         .scale(1.0)
                         .build();
                   }});
  }
  return all;
}

std::string nvrtc_arch(int compute_capability) {
  return "sm_" + std::to_string(compute_capability) + (compute_capability == 90 ? "a" : "");
}

// Host-side half of every case, run with or without a GPU: the problems are valid and their
// parameters (with the views marked as device memory) are accepted by make_fwd_params.
TEST(FwdGpuCases, ProblemsAndParamsAreValid) {
  int n = 0;
  for (const Case& test : cases()) {
    SCOPED_TRACE(test.name);
    TensorPool pool(1000 + n++);
    Problem p = test.make(pool);
    for (TensorView* view :
         {&p.q, &p.k, &p.v, &p.o, &p.lse, &p.bias, &p.alibi_slopes, &p.sink_logits})
      view->space = MemorySpace::device;
    const int64_t fake_index = 0;
    runtime::FwdDeviceIndices indices;
    if (!p.seqstart_q.empty()) indices.seqstart_q = indices.seqstart_k = &fake_index;
    if (!p.seqlen_k_per_batch.empty()) indices.seqlen_k_per_batch = &fake_index;
    const fmha::FwdParams params = runtime::make_fwd_params(p, indices);
    EXPECT_EQ(params.head_group, p.nhead_q / p.nhead_k);
    EXPECT_EQ(params.lse != nullptr, test.config.lse);
    EXPECT_EQ(params.sink_logits != nullptr, test.config.sink_logit);
    EXPECT_EQ(params.dropout_threshold != 0, test.config.dropout);
    EXPECT_NO_THROW(codegen::launch_shape(test.config, p));
  }
}

class FwdGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = gpu_skip_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    context_ = std::make_unique<jit::GpuContext>(0);
  }

  // Compiles every config once (in parallel) and loads the modules.
  std::vector<jit::BuildResult> build(const std::vector<KernelConfig>& configs) {
    std::vector<jit::BuildJob> jobs;
    for (const KernelConfig& c : configs) jobs.push_back({c.symbol(), codegen::generate_source(c)});
    jit::BuildOptions options;
    options.compile.arch = nvrtc_arch(context_->compute_capability());
    options.show_progress = false;
    jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
    EXPECT_TRUE(report.failure_report().empty()) << report.failure_report();
    return std::move(report.results);
  }

  void launch(const jit::LoadedModule& module, const KernelConfig& config,
              const fmha::FwdParams& params, const Problem& problem) {
    const jit::LaunchShape shape = codegen::launch_shape(config, problem);
    fmha::FwdParams argument = params;
    void* arguments[] = {&argument};
    jit::launch_kernel(module.function(config.symbol()), shape, arguments);
  }

  std::unique_ptr<jit::GpuContext> context_;
};

TEST_F(FwdGpu, MatchesReference) {
  const std::vector<Case> all = cases();
  std::vector<KernelConfig> configs;
  for (const Case& c : all) configs.push_back(c.config);
  const std::vector<jit::BuildResult> built = build(configs);
  ASSERT_EQ(built.size(), all.size());
  std::printf("device: %s (sm_%d)\n", context_->device_name().c_str(),
              context_->compute_capability());

  for (size_t n = 0; n < all.size(); ++n) {
    const Case& test = all[n];
    SCOPED_TRACE(test.name);
    ASSERT_TRUE(built[n].ok) << built[n].error;
    std::printf("%-45s compile %.2f s\n", test.name.c_str(), built[n].compile_seconds);
    TensorPool pool(1000 + n);
    const Problem host = test.make(pool);
    const DeviceProblem device(host);
    const fmha::FwdParams params = runtime::make_fwd_params(device.problem(), device.indices());

    jit::LoadedModule module(built[n].cubin);
    launch(module, test.config, params, device.problem());
    context_->synchronize();
    reference::forward(host);

    const bool fp16 = host.dtype == DType::fp16;
    const auto o = device.download(device.problem().o);
    const runtime::Agreement o_errors =
        compare(host.o, o.view, fp16 ? 2e-3 : 1e-2, fp16 ? 1e-2 : 2e-2);
    EXPECT_EQ(o_errors.mismatches, 0) << "of " << o_errors.compared << " O elements";
    std::printf("%-45s O max abs error %.3g", test.name.c_str(), o_errors.max_abs_error);
    if (test.check_padding) {
      EXPECT_EQ(clobbered_padding(o), 0) << "bytes written outside O";
    }
    if (host.return_lse) {
      const auto lse = device.download(device.problem().lse);
      const runtime::Agreement lse_errors = compare(host.lse, lse.view, 1e-3, 1e-4);
      EXPECT_EQ(lse_errors.mismatches, 0) << "of " << lse_errors.compared << " LSE elements";
      std::printf(", LSE %.3g", lse_errors.max_abs_error);
    }
    std::printf("\n");
  }
}

// Every tile the enumeration offers (block_m 64/128, block_n 32/64/128, 4 or 8 warps, 2 or 3
// stages) on one ragged causal problem.
TEST_F(FwdGpu, EveryTileMatchesReference) {
  std::vector<KernelConfig> configs;
  for (auto [m, w] : {std::pair{64, 4}, std::pair{128, 4}, std::pair{128, 8}}) {
    for (int n : {32, 64, 128}) {
      for (int stages : {2, 3}) {
        KernelConfig c = sm80_fwd_config(DType::bf16, 128, 128, m, n, w, stages);
        c.mask = MaskKind::causal;
        c.pad_seqlen_q = c.pad_seqlen_k = true;
        c.lse = true;
        configs.push_back(c);
      }
    }
  }
  const std::vector<jit::BuildResult> built = build(configs);
  ASSERT_EQ(built.size(), configs.size());
  TensorPool pool(99);
  const Problem host = batch(pool, DType::bf16, {2, 3, 1, 200, 333, 128, 128})
                           .causal(MaskAlign::bottom_right)
                           .scale(0.5)
                           .build();
  reference::forward(host);
  for (size_t n = 0; n < configs.size(); ++n) {
    SCOPED_TRACE(configs[n].name());
    ASSERT_TRUE(built[n].ok) << built[n].error;
    const DeviceProblem device(host);
    const fmha::FwdParams params = runtime::make_fwd_params(device.problem(), device.indices());
    jit::LoadedModule module(built[n].cubin);
    launch(module, configs[n], params, device.problem());
    context_->synchronize();
    const runtime::Agreement o =
        compare(host.o, device.download(device.problem().o).view, 1e-2, 2e-2);
    const runtime::Agreement lse =
        compare(host.lse, device.download(device.problem().lse).view, 1e-3, 1e-4);
    EXPECT_EQ(o.mismatches, 0);
    EXPECT_EQ(lse.mismatches, 0);
    std::printf("%-75s compile %.2f s, O max abs error %.3g, LSE %.3g\n", configs[n].name().c_str(),
                built[n].compile_seconds, o.max_abs_error, lse.max_abs_error);
  }
}

// Throughput of a few tiles at b=4, h=16, s=2048, d=128, bf16 (DESIGN §9 FLOP count). Opt-in
// (TILEFMHA_FWD_BENCH=1): a benchmark, not a timed test; it checks only that O is finite.
TEST_F(FwdGpu, Throughput) {
  if (std::getenv("TILEFMHA_FWD_BENCH") == nullptr) GTEST_SKIP() << "set TILEFMHA_FWD_BENCH=1";
  const int64_t b = 4, h = 16, s = 2048, d = 128;
  std::vector<KernelConfig> configs;
  for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
    for (auto [m, n, w, st] :
         {std::array{128, 64, 8, 2}, std::array{128, 128, 8, 2}, std::array{128, 64, 4, 2},
          std::array{128, 32, 4, 2}, std::array{128, 64, 4, 3}, std::array{64, 64, 4, 2},
          std::array{64, 128, 4, 2}}) {
      KernelConfig c = sm80_fwd_config(DType::bf16, d, d, m, n, w, st);
      c.mask = mask;
      configs.push_back(c);
    }
  }
  const std::vector<jit::BuildResult> built = build(configs);

  TensorPool pool(7);
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(b, h, h, s, s, d, d);
  builder.q(pool.uniform(DType::bf16, {b, s, h, d}, -1, 1))
      .k(pool.uniform(DType::bf16, {b, s, h, d}, -1, 1))
      .v(pool.uniform(DType::bf16, {b, s, h, d}, -1, 1))
      .o(pool.filled(DType::bf16, {b, s, h, d}, 0));
  const Problem plain = builder.build();
  const Problem causal = builder.causal().build();
  const DeviceProblem device_plain(plain), device_causal(causal);
  std::printf("device: %s\n", context_->device_name().c_str());
  for (size_t n = 0; n < configs.size(); ++n) {
    ASSERT_TRUE(built[n].ok) << built[n].error;
    const bool is_causal = configs[n].mask == MaskKind::causal;
    const DeviceProblem& device = is_causal ? device_causal : device_plain;
    const fmha::FwdParams params = runtime::make_fwd_params(device.problem(), device.indices());
    jit::LoadedModule module(built[n].cubin);
    for (int warm = 0; warm < 3; ++warm) launch(module, configs[n], params, device.problem());
    context_->synchronize();
    constexpr int kRepeats = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < kRepeats; ++r) launch(module, configs[n], params, device.problem());
    context_->synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRepeats;
    const double pairs = is_causal ? s * (s + 1) / 2.0 : double(s) * s;
    const double flops = 4.0 * b * h * pairs * d;
    std::printf("%-70s %7.3f ms %6.1f TFLOP/s\n", configs[n].name().c_str(), seconds * 1e3,
                flops / seconds / 1e12);
    const auto o = device.download(device.problem().o);
    int64_t non_finite = 0;
    for_each_element(o.view, [&](int64_t, int64_t offset) {
      non_finite += !std::isfinite(numeric::load(o.view.data, o.view.dtype, offset));
    });
    EXPECT_EQ(non_finite, 0) << configs[n].name();
  }
}

}  // namespace
}  // namespace tilefmha
