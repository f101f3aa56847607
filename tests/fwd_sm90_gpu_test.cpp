// The sm90_ws forward kernel on a Hopper GPU: JIT-compiled from generated sources, run on
// device copies of fresh random problems whose outputs are poisoned (all-ones bytes: NaN)
// beforehand, and compared with the CPU reference; plus a throughput report (never a timed
// assertion). Skipped without a driver, a GPU, NVRTC, or on a GPU other than sm_90.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codegen/fwd_sm90.hpp"
#include "core/numeric.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/module.hpp"
#include "runtime/fwd_sm90_params.hpp"
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
using testing::TensorPool;

// Every case pads sequences: TMA bounds-checks them at no cost.
KernelConfig sm90_config(DType dtype, int hdim_q, int hdim_v, int block_m, int block_n,
                         int stages = 2) {
  KernelConfig c = testing::sm90_fwd_config(dtype, hdim_q, hdim_v, block_m, block_n, stages);
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  return c;
}

struct Case {
  std::string name;
  KernelConfig config;
  fmha::Sm90Schedule schedule;
  std::function<Problem(TensorPool&)> make;
  bool check_padding = false;  // O lives in gapped memory whose gaps must stay untouched
};

ProblemBuilder batch(TensorPool& pool, DType dtype, Dims d, QkvLayout layout = QkvLayout::bshd) {
  return testing::batch_problem(pool, Family::fwd, dtype, d, layout);
}

std::vector<Case> cases() {
  using S = fmha::Sm90Schedule;
  std::vector<Case> all;
  // One tile, every schedule: the smallest problem that exercises the whole pipeline.
  for (S schedule : {S::serial, S::overlap, S::pingpong}) {
    KernelConfig c = sm90_config(DType::bf16, 128, 128, 128, 128);
    c.lse = true;
    all.push_back({"bf16_d128_one_tile_schedule" + std::to_string(int(schedule)), c, schedule,
                   [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {1, 1, 1, 128, 128, 128, 128}).build();
                   }});
  }
  for (S schedule : {S::serial, S::pingpong}) {
    KernelConfig c = sm90_config(DType::bf16, 128, 128, 128, 128);
    c.lse = true;
    all.push_back({"bf16_d128_plain_schedule" + std::to_string(int(schedule)), c, schedule,
                   [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 4, 4, 512, 768, 128, 128}).build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::bf16, 128, 128, 128, 128);
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back({"bf16_d128_causal_ragged_gqa_bhsd", c, S::pingpong, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 8, 2, 1000, 1000, 128, 128},
                                  QkvLayout::bhsd)
                         .causal()
                         .build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::fp16, 128, 128, 128, 176);
    c.lse = true;
    all.push_back({"fp16_d128_n176_ragged_gapped_o", c, S::pingpong,
                   [](TensorPool& pool) {
                     const DType t = DType::fp16;
                     return ProblemBuilder(Family::fwd)
                         .dtype(t)
                         .shape(2, 3, 3, 333, 1000, 128, 128)
                         .q(gapped(pool, t, 2, 333, 3, 128))
                         .k(pool.qkv(t, QkvLayout::bshd, 2, 1000, 3, 128))
                         .v(pool.qkv(t, QkvLayout::bshd, 2, 1000, 3, 128))
                         .o(gapped(pool, t, 2, 333, 3, 128))
                         .lse(pool.filled(DType::fp32, {2, 3, 333}, NAN))
                         .scale(0.2)
                         .build();
                   },
                   true});
  }
  {
    KernelConfig c = sm90_config(DType::fp16, 64, 64, 192, 128);
    c.mask = MaskKind::causal;
    c.lse = true;
    // Bottom-right with more queries than keys: the first 200 rows see no key (O 0, LSE -inf).
    all.push_back(
        {"fp16_d64_m192_causal_bottom_right_empty_rows", c, S::pingpong, [](TensorPool& pool) {
           return batch(pool, DType::fp16, {2, 4, 4, 700, 500, 64, 64})
               .causal(MaskAlign::bottom_right)
               .build();
         }});
  }
  {
    KernelConfig c = sm90_config(DType::bf16, 256, 256, 128, 80);
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back({"bf16_d256_n80_causal_bottom_right", c, S::pingpong, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 2, 1, 200, 333, 256, 256})
                         .causal(MaskAlign::bottom_right)
                         .build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::bf16, 256, 256, 128, 80);
    c.lse = true;
    all.push_back({"bf16_d256_n80_plain_overlap", c, S::overlap, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {1, 2, 2, 256, 400, 256, 256}).build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::fp16, 192, 128, 128, 112);
    c.mask = MaskKind::window;
    c.softcap = true;
    c.bias = BiasKind::alibi;
    c.lse = true;
    all.push_back(
        {"fp16_d192x128_window_sinks_softcap_alibi", c, S::pingpong, [](TensorPool& pool) {
           return batch(pool, DType::fp16, {2, 4, 2, 300, 300, 192, 128})
               .window(100, 20)
               .sink_tokens(7)
               .softcap(4.0)
               .alibi(pool.uniform(DType::fp32, {4}, 0.01, 0.2))
               .build();
         }});
  }
  {
    KernelConfig c = sm90_config(DType::bf16, 128, 128, 128, 128);
    c.bias = BiasKind::elementwise;
    all.push_back({"bf16_d128_fp32_bias_no_lse", c, S::pingpong, [](TensorPool& pool) {
                     Problem p = batch(pool, DType::bf16, {1, 2, 2, 200, 260, 128, 128})
                                     .bias(pool.uniform(DType::fp32, {1, 2, 200, 260}, -2, 2))
                                     .build();
                     p.return_lse = false;
                     p.lse = {};
                     return p;
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::bf16, 64, 64, 192, 128);
    c.mode = Mode::group;
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back({"bf16_d64_group_causal_bottom_right", c, S::pingpong, [](TensorPool& pool) {
                     // Query lengths 150, 0, 401, 1 over key lengths 100, 36, 600, 1: the first
                     // 50 rows of sequence 0 see no key.
                     return testing::group_problem(pool, Family::fwd, DType::bf16,
                                                   {0, 150, 150, 551, 552}, {0, 100, 136, 736, 737},
                                                   4, 2, 64, 64)
                         .causal(MaskAlign::bottom_right)
                         .build();
                   }});
  }
  // Packed GQA: the g query heads of a KV head share a tile (short query rows, decode).
  {
    KernelConfig c = sm90_config(DType::bf16, 128, 128, 128, 128);
    c.pack_gqa = true;
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back(
        {"bf16_d128_packed_gqa4_causal_bottom_right", c, S::pingpong, [](TensorPool& pool) {
           // 40 positions x 4 heads: two packed tiles of 32 positions per KV head.
           return batch(pool, DType::bf16, {2, 8, 2, 40, 700, 128, 128})
               .causal(MaskAlign::bottom_right)
               .build();
         }});
  }
  {
    KernelConfig c = sm90_config(DType::fp16, 64, 64, 128, 128);
    c.pack_gqa = true;
    c.lse = true;
    all.push_back({"fp16_d64_packed_gqa8_decode", c, S::pingpong, [](TensorPool& pool) {
                     return batch(pool, DType::fp16, {3, 16, 2, 1, 333, 64, 64}).build();
                   }});
  }
  // One consumer warpgroup per CTA, two CTAs per SM (registers reallocated from 128 a thread):
  // causal rows over several query blocks, with LSE.
  {
    KernelConfig c = sm90_config(DType::bf16, 64, 64, 64, 128);
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back({"bf16_d64_m64_two_ctas_per_sm_causal", c, S::overlap, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 3, 3, 300, 300, 64, 64}).causal().build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::fp16, 64, 64, 64, 128);
    c.mode = Mode::group;
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back(
        {"fp16_d64_m64_two_ctas_per_sm_group_causal", c, S::overlap, [](TensorPool& pool) {
           return testing::group_problem(pool, Family::fwd, DType::fp16, {0, 150, 150, 551, 552},
                                         {0, 100, 136, 736, 737}, 4, 2, 64, 64)
               .causal(MaskAlign::bottom_right)
               .build();
         }});
  }
  // Head dims narrower than the kernel's panels: TMA zero-fills the columns past them on load
  // and clips them on store (group mode stores whole 16-byte chunks up to the head dim).
  {
    KernelConfig c = sm90_config(DType::bf16, 128, 128, 128, 128);
    c.pad_hdim_q = c.pad_hdim_v = true;
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back({"bf16_d96_on_d128_padded_causal", c, S::pingpong, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 4, 2, 300, 300, 96, 96}).causal().build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::fp16, 128, 128, 128, 128);
    c.pad_hdim_q = c.pad_hdim_v = true;
    c.mode = Mode::group;
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back({"fp16_d80_on_d128_padded_group_causal", c, S::pingpong, [](TensorPool& pool) {
                     return testing::group_problem(pool, Family::fwd, DType::fp16,
                                                   {0, 150, 150, 551}, {0, 150, 186, 736}, 4, 2, 80,
                                                   80)
                         .causal(MaskAlign::bottom_right)
                         .build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::bf16, 64, 64, 128, 128);
    c.pad_hdim_q = c.pad_hdim_v = true;
    c.lse = true;
    all.push_back({"bf16_d32_on_d64_padded", c, S::pingpong, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 2, 2, 200, 333, 32, 32}).build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::bf16, 128, 128, 128, 128);
    c.mask = MaskKind::causal;
    c.dropout = true;
    c.sink_logit = true;
    c.lse = true;
    all.push_back({"bf16_d128_causal_dropout_sink_logit", c, S::pingpong, [](TensorPool& pool) {
                     return batch(pool, DType::bf16, {2, 4, 2, 300, 300, 128, 128})
                         .causal()
                         .dropout(0.25, 0x1234567890ABCDEFull, 77)
                         .sink_logits(pool.uniform(DType::fp32, {4}, -1, 2))
                         .build();
                   }});
  }
  {
    KernelConfig c = sm90_config(DType::fp16, 128, 128, 128, 128, 3);
    c.mask = MaskKind::causal;
    c.lse = true;
    all.push_back({"fp16_d128_causal_key_lengths_3_stages", c, S::pingpong, [](TensorPool& pool) {
                     return batch(pool, DType::fp16, {3, 2, 2, 300, 640, 128, 128})
                         .key_lengths({640, 129, 0})
                         .causal(MaskAlign::bottom_right)
                         .build();
                   }});
  }
  return all;
}

// Host-side half of every case, run with or without a GPU: the problems are valid, their views
// (marked as device memory) give TMA map specs, and the launch shapes fit the hardware.
TEST(FwdSm90GpuCases, ProblemsMapsAndLaunchShapesAreValid) {
  int n = 0;
  for (const Case& test : cases()) {
    SCOPED_TRACE(test.name);
    TensorPool pool(1000 + n++);
    Problem p = test.make(pool);
    EXPECT_NO_THROW(codegen::check_supported_sm90(test.config));
    EXPECT_NO_THROW(runtime::sm90_tensor_map_specs(p, test.config));
    const jit::LaunchShape shape = codegen::launch_shape_sm90(test.config, p, 0);
    // Packed GQA tiles hold block_m / g query positions of a KV head's g query heads.
    const int64_t group = test.config.pack_gqa ? p.nhead_q / p.nhead_k : 1;
    const int64_t rows = test.config.block_m / group;
    const int64_t query_blocks = (p.seqlen_q + rows - 1) / rows;
    const int64_t heads = test.config.pack_gqa ? p.nhead_k : p.nhead_q;
    EXPECT_EQ(shape.grid[0], static_cast<unsigned>(query_blocks * heads * p.batch));
    EXPECT_LE(shape.dynamic_shared_bytes, 232448u);
    EXPECT_EQ(p.return_lse, test.config.lse);
  }
}

class FwdSm90Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = gpu_skip_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    context_ = std::make_unique<jit::GpuContext>(0);
    if (context_->compute_capability() != 90)
      GTEST_SKIP() << "sm90_ws needs an sm_90 GPU, found sm_" << context_->compute_capability();
  }

  // Compiles every (config, variant) once, in parallel.
  std::vector<jit::BuildResult> build(
      const std::vector<std::pair<KernelConfig, codegen::Sm90Variant>>& kernels) {
    std::vector<jit::BuildJob> jobs;
    for (const auto& [c, variant] : kernels)
      jobs.push_back({c.symbol(), codegen::generate_sm90_source(c, variant)});
    jit::BuildOptions options;
    options.compile.arch = "sm_90a";
    options.compile.extra_arguments = {"--ptxas-options=-v"};
    options.show_progress = false;
    jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
    EXPECT_TRUE(report.failure_report().empty()) << report.failure_report();
    return std::move(report.results);
  }

  // A persistent variant runs on at most max_ctas CTAs, each looping over tiles.
  void launch(const jit::LoadedModule& module, const KernelConfig& config,
              const codegen::Sm90Variant& variant, const fmha::Sm90FwdParams& params,
              const Problem& problem, int64_t max_ctas) {
    const jit::LaunchShape shape = codegen::launch_shape_sm90(config, problem, variant, max_ctas);
    fmha::Sm90FwdParams argument = params;
    runtime::bind_sm90_grid(argument, config, shape.grid[0]);
    void* arguments[] = {&argument};
    jit::launch_kernel(module.function(config.symbol()), shape, arguments);
  }

  std::unique_ptr<jit::GpuContext> context_;
};

TEST_F(FwdSm90Gpu, MatchesReference) {
  const std::vector<Case> all = cases();
  std::vector<std::pair<KernelConfig, codegen::Sm90Variant>> kernels;
  // Each case twice: one CTA per tile, and persistent on 7 CTAs that each run many tiles (ring
  // positions, Q buffer reuse and turn taking carried across tiles).
  for (const Case& c : all) {
    kernels.emplace_back(c.config, codegen::Sm90Variant{c.schedule, false});
    kernels.emplace_back(c.config, codegen::Sm90Variant{c.schedule, true});
  }
  const std::vector<jit::BuildResult> built = build(kernels);
  ASSERT_EQ(built.size(), 2 * all.size());
  std::printf("device: %s (sm_%d)\n", context_->device_name().c_str(),
              context_->compute_capability());

  for (size_t n = 0; n < all.size(); ++n) {
    const Case& test = all[n];
    SCOPED_TRACE(test.name);
    TensorPool pool(std::random_device{}());
    const Problem host = test.make(pool);
    reference::forward(host);
    const bool fp16 = host.dtype == DType::fp16;

    for (size_t k = 2 * n; k < 2 * n + 2; ++k) {
      ASSERT_TRUE(built[k].ok) << built[k].error;
      const jit::LoadedModule module(built[k].cubin);
      const codegen::Sm90Variant& variant = kernels[k].second;
      const DeviceProblem device(host);  // freshly poisoned outputs
      const fmha::Sm90FwdParams params =
          runtime::make_fwd_sm90_params(device.problem(), device.indices(), test.config);
      const std::string label = test.name + (variant.persistent ? " persistent" : "");
      std::printf("%-60s launching\n", label.c_str());
      std::fflush(stdout);  // a hung kernel must not take the log of the earlier cases with it
      launch(module, test.config, variant, params, device.problem(), 7);
      context_->synchronize();

      const auto o = device.download(device.problem().o);
      const runtime::Agreement o_errors =
          compare(host.o, o.view, fp16 ? 2e-3 : 1e-2, fp16 ? 1e-2 : 2e-2);
      EXPECT_EQ(o_errors.mismatches, 0) << label << ": of " << o_errors.compared << " O elements";
      std::printf("%-60s O max abs error %.3g", label.c_str(), o_errors.max_abs_error);
      if (test.check_padding) {
        EXPECT_EQ(clobbered_padding(o), 0) << label << ": bytes written outside O";
      }
      if (host.return_lse) {
        const auto lse = device.download(device.problem().lse);
        const runtime::Agreement lse_errors = compare(host.lse, lse.view, 1e-3, 1e-4);
        EXPECT_EQ(lse_errors.mismatches, 0)
            << label << ": of " << lse_errors.compared << " LSE elements";
        std::printf(", LSE %.3g", lse_errors.max_abs_error);
      }
      std::printf("\n");
    }
    // The ptxas report: registers and spills of the entry function.
    std::string report;
    const std::string& note = built[2 * n].note;
    for (size_t begin = 0; begin < note.size();) {
      size_t end = note.find('\n', begin);
      if (end == std::string::npos) end = note.size();
      const std::string line = note.substr(begin, end - begin);
      if (line.find("spill") != std::string::npos || line.find("Used") != std::string::npos)
        report += "    " + line + "\n";
      begin = end + 1;
    }
    std::printf("%s", report.c_str());
    std::fflush(stdout);
  }
}

// Random 16-bit values in [-1, 1) straight as bit patterns: the benchmark tensors hold ~100M
// elements, too many for the exact per-element rounding of TensorPool.
std::vector<uint16_t> random_bf16(int64_t count, uint64_t seed) {
  std::vector<uint16_t> values(static_cast<size_t>(count));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t& value : values) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    const float x = static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    value = numeric::float_to_bf16(x);
  }
  return values;
}

// FA3-protocol throughput: 16k tokens (batch = 16384 / seqlen), 2048 hidden (heads = 2048 /
// hdim), bf16, DESIGN §9 FLOP count, each tile one CTA per tile and persistent. Prints
// TFLOP/s (mean over 20-50 back-to-back launches); asserts only that O is finite.
TEST_F(FwdSm90Gpu, Throughput) {
  // About a minute on an H100: opt-in, so the GPU suite stays quick.
  if (std::getenv("TILEFMHA_SM90_BENCH") == nullptr) GTEST_SKIP() << "set TILEFMHA_SM90_BENCH=1";
  struct Tile {
    int hdim, block_m, block_n, stages;
    MaskKind mask;
  };
  // The dispatcher's tiles and the alternatives it was tuned against (docs/performance.md).
  const Tile tiles[] = {{128, 128, 128, 2, MaskKind::none},   {128, 128, 176, 2, MaskKind::none},
                        {128, 128, 192, 2, MaskKind::none},   {128, 128, 128, 2, MaskKind::causal},
                        {128, 128, 176, 2, MaskKind::causal}, {64, 192, 128, 2, MaskKind::none},
                        {64, 128, 128, 2, MaskKind::none},    {64, 192, 128, 2, MaskKind::causal},
                        {64, 128, 128, 2, MaskKind::causal},  {64, 64, 128, 2, MaskKind::none},
                        {64, 64, 128, 2, MaskKind::causal},   {256, 128, 80, 2, MaskKind::none},
                        {256, 128, 80, 2, MaskKind::causal}};
  std::vector<std::pair<KernelConfig, codegen::Sm90Variant>> kernels;
  for (const Tile& t : tiles) {
    KernelConfig c = sm90_config(DType::bf16, t.hdim, t.hdim, t.block_m, t.block_n, t.stages);
    c.mask = t.mask;
    codegen::Sm90Variant variant = codegen::default_sm90_variant(c);
    variant.persistent = false;
    kernels.emplace_back(c, variant);
    variant.persistent = true;
    kernels.emplace_back(c, variant);
  }
  const std::vector<jit::BuildResult> built = build(kernels);
  std::vector<jit::LoadedModule> modules;
  for (const jit::BuildResult& result : built) {
    ASSERT_TRUE(result.ok) << result.error;
    modules.emplace_back(result.cubin);
  }
  std::printf("device: %s\n", context_->device_name().c_str());
  for (int64_t d : {128, 64, 256}) {
    for (int64_t s : {512, 1024, 2048, 4096, 8192, 16384}) {
      if (d == 256 && s != 512 && s != 1024 && s != 8192) continue;
      const int64_t b = 16384 / s, h = 2048 / d;
      const int64_t count = b * s * h * d;
      std::vector<uint16_t> q = random_bf16(count, 1), k = random_bf16(count, 2),
                            v = random_bf16(count, 3), o(static_cast<size_t>(count));
      ProblemBuilder builder(Family::fwd);
      builder.dtype(DType::bf16)
          .shape(b, h, h, s, s, d, d)
          .q(bshd(q.data(), DType::bf16, b, s, h, d))
          .k(bshd(k.data(), DType::bf16, b, s, h, d))
          .v(bshd(v.data(), DType::bf16, b, s, h, d))
          .o(bshd(o.data(), DType::bf16, b, s, h, d));
      const Problem plain = builder.build();
      const Problem causal_problem = builder.causal().build();
      const DeviceProblem device_plain(plain), device_causal(causal_problem);
      for (size_t n = 0; n < kernels.size(); ++n) {
        const KernelConfig& c = kernels[n].first;
        if (c.hdim_q != d || (c.block_n > 128 && s < 2048)) continue;
        const bool causal = c.mask == MaskKind::causal;
        const DeviceProblem& device = causal ? device_causal : device_plain;
        const fmha::Sm90FwdParams params =
            runtime::make_fwd_sm90_params(device.problem(), device.indices(), c);
        const codegen::Sm90Variant& variant = kernels[n].second;
        // A looping kernel runs on both grids: one CTA per SM, and one CTA per tile (the grid
        // the dispatcher gives it where a persistent grid does not pay).
        const int64_t grids[2] = {context_->multiprocessor_count(), 0};
        for (int g = 0; g < (variant.persistent ? 2 : 1); ++g) {
          auto run = [&] { launch(modules[n], c, variant, params, device.problem(), grids[g]); };
          for (int warm = 0; warm < 3; ++warm) run();
          context_->synchronize();
          const int repeats = s >= 4096 ? 20 : 50;
          const auto start = std::chrono::steady_clock::now();
          for (int r = 0; r < repeats; ++r) run();
          context_->synchronize();
          const double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
              repeats;
          const double pairs = causal ? s * (s + 1) / 2.0 : double(s) * s;
          const double flops = 4.0 * b * h * pairs * d;
          const char* grid = !variant.persistent ? "per-tile"
                             : g == 0            ? "persistent"
                                                 : "loop/tiles";
          std::printf(
              "d%-3lld m%-3d n%-3d s%d %-6s %-10s b%-2lld h%-2lld s%-5lld %8.3f ms %6.1f TFLOP/s\n",
              static_cast<long long>(d), c.block_m, c.block_n, c.stages, causal ? "causal" : "none",
              grid, static_cast<long long>(b), static_cast<long long>(h), static_cast<long long>(s),
              seconds * 1e3, flops / seconds / 1e12);
          std::fflush(stdout);
        }
        const auto out = device.download(device.problem().o);
        const auto* bits = reinterpret_cast<const uint16_t*>(out.bytes.data());
        int64_t non_finite = 0;
        for (int64_t e = 0; e < count; ++e) non_finite += (bits[e] & 0x7F80u) == 0x7F80u;
        EXPECT_EQ(non_finite, 0) << c.name() << " s=" << s;
      }
    }
  }
}

}  // namespace
}  // namespace tilefmha
