// FP8 attention on a Hopper GPU through the Engine (sm90_ws with e4m3/e5m2 codes, bf16 O):
// fresh random codes and descales, outputs poisoned before the run, compared with the CPU
// reference on the same codes. Skipped without a GPU or on a GPU other than sm_90.
//
// Tolerance: the kernel rounds each probability P to e4m3 before P V (relative error at most
// 2^-4), while the reference keeps it exact, so O may differ by up to 2^-4 x max |V| (the
// dequantized V), plus bf16's rounding of O. The logits are scaled so that the softmax is
// peaked: a key in the wrong place or a descale applied to the wrong block moves O by about
// |V|, far past that bound. LSE has no P rounding, but Hopper's fp8 tensor cores add products
// into a narrower accumulator than fp32 (about 14 significant bits), so the scores, and LSE with
// them, carry a relative error of about 2^-10 where bf16 GEMMs carry 2^-23.
//
// Each case runs as the engine plans it (small problems split the keys: fp8 split-KV partials
// and the combine) and again in one pass (num_splits 1: the fp8 forward kernel itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/fwd_sm90.hpp"
#include "core/tensor_iteration.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/module.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/fwd_sm90_params.hpp"
#include "runtime/tolerance.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_availability.hpp"
#include "support/gpu_problem.hpp"
#include "support/kernel_configs.hpp"
#include "support/ptxas_report.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/reference.hpp"
#include "uniform_fill.hpp"

namespace tilefmha {
namespace {

using testing::Dims;
using testing::TensorPool;

// Codes spread over e4m3's range, brought back near [-1, 1] by the descales below.
constexpr double kCodeRange = 64.0;

struct Fp8Case {
  std::string name;
  std::function<Problem(TensorPool&)> make;
};

// Per-tensor descales near 1 / kCodeRange (distinct, so a swapped pair shows).
Fp8Scales per_tensor() {
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  scales.q_descale = 1.0 / 48;
  scales.k_descale = 1.0 / 80;
  scales.v_descale = 1.0 / 64;
  return scales;
}

// Per-block tables around 1 / kCodeRange, varying by a factor of 4 between blocks;
// `zero_v_block` sets one V block's descale to 0 (that block then contributes nothing).
Fp8Scales per_block(TensorPool& pool, int64_t batch, int64_t nhead_q, int64_t nhead_k,
                    int64_t seqlen_q, int64_t seqlen_k, bool zero_v_block = false) {
  const auto blocks = [](int64_t seq) { return (seq + kFp8ScaleBlock - 1) / kFp8ScaleBlock; };
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_block;
  const double lo = 0.5 / kCodeRange, hi = 2.0 / kCodeRange;
  scales.q_block = pool.uniform(DType::fp32, {batch, nhead_q, blocks(seqlen_q)}, lo, hi);
  scales.k_block = pool.uniform(DType::fp32, {batch, nhead_k, blocks(seqlen_k)}, lo, hi);
  scales.v_block = pool.uniform(DType::fp32, {batch, nhead_k, blocks(seqlen_k)}, lo, hi);
  if (zero_v_block) numeric::store(scales.v_block.data, DType::fp32, 1, 0.0);
  return scales;
}

// Per-page descales of K and V around 1 / kCodeRange (Q per tensor).
Fp8Scales per_page(TensorPool& pool, int64_t num_pages, int64_t nhead_k) {
  Fp8Scales scales = per_tensor();
  scales.kind = Fp8ScaleKind::per_page;
  const double lo = 0.5 / kCodeRange, hi = 2.0 / kCodeRange;
  scales.k_page = pool.uniform(DType::fp32, {num_pages, nhead_k}, lo, hi);
  scales.v_page = pool.uniform(DType::fp32, {num_pages, nhead_k}, lo, hi);
  return scales;
}

ProblemBuilder batch(TensorPool& pool, DType dtype, Dims d) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(dtype)
      .shape(d.batch, d.nhead_q, d.nhead_k, d.seqlen_q, d.seqlen_k, d.hdim_q, d.hdim_v)
      .q(pool.uniform(dtype, {d.batch, d.seqlen_q, d.nhead_q, d.hdim_q}, -kCodeRange, kCodeRange))
      .k(pool.uniform(dtype, {d.batch, d.seqlen_k, d.nhead_k, d.hdim_q}, -kCodeRange, kCodeRange))
      .v(pool.uniform(dtype, {d.batch, d.seqlen_k, d.nhead_k, d.hdim_v}, -kCodeRange, kCodeRange))
      .o(pool.filled(DType::bf16, {d.batch, d.seqlen_q, d.nhead_q, d.hdim_v}, 0.0))
      .lse(pool.filled(DType::fp32, {d.batch, d.nhead_q, d.seqlen_q}, 0.0))
      // Dequantized logits q.k have a standard deviation of about sqrt(d) / 3; scale 1 keeps
      // them that wide, so each row's softmax picks out a few keys.
      .scale(1.0 / std::sqrt(static_cast<double>(d.hdim_q)) * 8.0);
  return builder;
}

// Packed variable-length sequences (group mode) of e4m3 Q, K and V with `hdim`-wide heads.
ProblemBuilder varlen(TensorPool& pool, int64_t nhead_q, int64_t nhead_k, int64_t hdim,
                      const std::vector<int64_t>& seqstart_q,
                      const std::vector<int64_t>& seqstart_k) {
  const DType e4m3 = DType::fp8_e4m3;
  const int64_t tokens_q = seqstart_q.back(), tokens_k = seqstart_k.back();
  ProblemBuilder builder(Family::fwd);
  builder.dtype(e4m3)
      .shape(1, nhead_q, nhead_k, 0, 0, hdim, hdim)
      .group(seqstart_q, seqstart_k)
      .q(pool.uniform(e4m3, {1, tokens_q, nhead_q, hdim}, -kCodeRange, kCodeRange))
      .k(pool.uniform(e4m3, {1, tokens_k, nhead_k, hdim}, -kCodeRange, kCodeRange))
      .v(pool.uniform(e4m3, {1, tokens_k, nhead_k, hdim}, -kCodeRange, kCodeRange))
      .o(pool.filled(DType::bf16, {1, tokens_q, nhead_q, hdim}, 0.0))
      .lse(pool.filled(DType::fp32, {1, nhead_q, tokens_q}, 0.0))
      .scale(8.0 / std::sqrt(static_cast<double>(hdim)));
  return builder;
}

// A bound on |V| after dequantization (largest code times largest descale): the scale of the
// tolerance's P-rounding term.
double max_abs_dequantized_v(const Problem& p) {
  double code = 0;
  for_each_element(p.v, [&](int64_t, int64_t offset) {
    code = std::max(code, std::abs(numeric::load(p.v.data, p.v.dtype, offset)));
  });
  double scale = p.fp8.v_descale;
  const TensorView& table = p.fp8.kind == Fp8ScaleKind::per_page ? p.fp8.v_page : p.fp8.v_block;
  if (p.fp8.kind == Fp8ScaleKind::per_block || p.fp8.kind == Fp8ScaleKind::per_page) {
    scale = 0;
    for_each_element(table, [&](int64_t, int64_t offset) {
      scale = std::max(scale, numeric::load(table.data, DType::fp32, offset));
    });
  }
  return code * scale;
}

// Paged decode over a vLLM block table of `page`-key pages, GQA packed: pages are dealt out in
// reverse, and every slot past a sequence's keys holds NaN codes (stale cache), which must not
// reach O (the transposer writes zeros for those keys). Per-page descales vary by a factor of 4
// between pages and heads.
Problem paged_decode(TensorPool& pool, int64_t page, Fp8ScaleKind kind) {
  const DType e4m3 = DType::fp8_e4m3;
  const std::vector<int64_t> lengths = {37, 300, 129};
  const int64_t heads_q = 8, heads_k = 2, d = 128, pages_per_seq = (300 + page - 1) / page;
  const int64_t batch = static_cast<int64_t>(lengths.size()), num_pages = batch * pages_per_seq;
  PagedKv paged;
  paged.table = PageTableKind::vllm_block_table;
  paged.page_size = page;
  paged.num_pages = num_pages;
  paged.max_pages_per_seq = pages_per_seq;
  for (int64_t n = 0; n < num_pages; ++n)
    paged.block_table.push_back(static_cast<int32_t>(num_pages - 1 - n));
  const TensorView k = pool.uniform(e4m3, {num_pages, page, heads_k, d}, -kCodeRange, kCodeRange);
  const TensorView v = pool.uniform(e4m3, {num_pages, page, heads_k, d}, -kCodeRange, kCodeRange);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t key = lengths[b]; key < pages_per_seq * page; ++key) {
      const int64_t slot_page = paged.block_table[b * pages_per_seq + key / page];
      for (int64_t h = 0; h < heads_k; ++h)
        for (int64_t x = 0; x < d; ++x)
          for (const TensorView* cache : {&k, &v})
            numeric::store(cache->data, e4m3,
                           ((slot_page * page + key % page) * heads_k + h) * d + x, NAN);
    }
  }
  return ProblemBuilder(Family::fwd_pagedkv)
      .dtype(e4m3)
      .shape(batch, heads_q, heads_k, 1, 0, d, d)
      .key_lengths(lengths)
      .paged(paged)
      .q(pool.uniform(e4m3, {batch, 1, heads_q, d}, -kCodeRange, kCodeRange))
      .k(k)
      .v(v)
      .o(pool.filled(DType::bf16, {batch, 1, heads_q, d}, 0.0))
      .lse(pool.filled(DType::fp32, {batch, heads_q, 1}, 0.0))
      .fp8_scales(kind == Fp8ScaleKind::per_page ? per_page(pool, num_pages, heads_k)
                                                 : per_tensor())
      .scale(8.0 / std::sqrt(static_cast<double>(d)))
      .build();
}

std::vector<Fp8Case> cases() {
  const DType e4m3 = DType::fp8_e4m3;
  std::vector<Fp8Case> all;
  all.push_back(
      {"e4m3_d128_per_tensor_ragged", [=](TensorPool& pool) {
         return batch(pool, e4m3, {2, 4, 4, 300, 700, 128, 128}).fp8_scales(per_tensor()).build();
       }});
  all.push_back({"e4m3_d128_per_tensor_causal_gqa", [=](TensorPool& pool) {
                   return batch(pool, e4m3, {2, 8, 2, 1000, 1000, 128, 128})
                       .fp8_scales(per_tensor())
                       .causal()
                       .build();
                 }});
  all.push_back({"e4m3_d128_per_block_causal_bottom_right", [=](TensorPool& pool) {
                   return batch(pool, e4m3, {2, 4, 2, 500, 900, 128, 128})
                       .fp8_scales(per_block(pool, 2, 4, 2, 500, 900, true))
                       .causal(MaskAlign::bottom_right)
                       .build();
                 }});
  all.push_back(
      {"e4m3_d256_per_tensor", [=](TensorPool& pool) {
         return batch(pool, e4m3, {1, 4, 4, 384, 520, 256, 256}).fp8_scales(per_tensor()).build();
       }});
  all.push_back({"e4m3_d256_per_block_window", [=](TensorPool& pool) {
                   return batch(pool, e4m3, {2, 2, 2, 640, 640, 256, 256})
                       .fp8_scales(per_block(pool, 2, 2, 2, 640, 640))
                       .window(200, 0)
                       .build();
                 }});
  all.push_back({"e4m3_d128_per_block_varlen", [](TensorPool& pool) {
                   return varlen(pool, 4, 2, 128, {0, 130, 130, 517}, {0, 260, 300, 1023})
                       .fp8_scales(per_block(pool, 3, 4, 2, 387, 723))
                       .build();
                 }});
  all.push_back({"e4m3_d256_per_tensor_varlen_causal", [](TensorPool& pool) {
                   return varlen(pool, 2, 2, 256, {0, 200, 200, 711}, {0, 330, 330, 900})
                       .fp8_scales(per_tensor())
                       .causal(MaskAlign::bottom_right)
                       .build();
                 }});
  all.push_back({"e4m3_d128_paged_decode_stale_nan_slots", [](TensorPool& pool) {
                   return paged_decode(pool, 16, Fp8ScaleKind::per_tensor);
                 }});
  all.push_back({"e4m3_d128_paged_decode_per_page16",
                 [](TensorPool& pool) { return paged_decode(pool, 16, Fp8ScaleKind::per_page); }});
  all.push_back({"e4m3_d128_paged_decode_per_page256",
                 [](TensorPool& pool) { return paged_decode(pool, 256, Fp8ScaleKind::per_page); }});
  all.push_back({"e5m2_d128_per_tensor_softcap", [](TensorPool& pool) {
                   return batch(pool, DType::fp8_e5m2, {1, 4, 4, 256, 384, 128, 128})
                       .fp8_scales(per_tensor())
                       .softcap(20.0)
                       .build();
                 }});
  return all;
}

class FwdSm90Fp8Gpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::gpu_skip_reason().empty()) return;
    if (jit::GpuContext(0).compute_capability() == 90) engine_ = std::make_unique<Engine>();
  }
  static void TearDownTestSuite() { engine_.reset(); }
  void SetUp() override {
    if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
    if (engine_ == nullptr) GTEST_SKIP() << "the fp8 kernels need an sm_90 GPU";
  }
  static std::unique_ptr<Engine> engine_;
};

std::unique_ptr<Engine> FwdSm90Fp8Gpu::engine_;

TEST_F(FwdSm90Fp8Gpu, MatchesTheReference) {
  uint64_t seed = 900;
  for (const Fp8Case& c : cases()) {
    TensorPool pool(seed++);
    const Problem host = c.make(pool);
    reference::run(host);
    const runtime::DeviceMirror mirror(host);
    for (const int64_t splits : {int64_t{0}, int64_t{1}}) {
      const std::string name = c.name + (splits == 1 ? " one-pass" : " planned");
      SCOPED_TRACE(name);
      Problem device = mirror.device_problem();
      device.split.num_splits = splits;
      mirror.poison_outputs();
      const EnginePlan plan = engine_->plan(device);
      const std::vector<KernelConfig> kernels = plan.kernels();
      ASSERT_FALSE(kernels.empty());
      EXPECT_EQ(kernels.front().pipeline, Pipeline::sm90_ws) << plan.explanation();
      EXPECT_EQ(kernels.front().dtype, host.dtype) << plan.explanation();
      jit::Stream stream;
      engine_->run(plan, device, stream.handle());
      stream.synchronize();

      const double atol = std::ldexp(max_abs_dequantized_v(host), -4) + 1e-2;
      const auto o = mirror.download(device.o);
      const runtime::Agreement o_errors = testing::compare(host.o, o.view, atol, 1e-2);
      EXPECT_EQ(o_errors.mismatches, 0) << "of " << o_errors.compared << " O elements";
      EXPECT_EQ(o_errors.compared, host.o.numel());
      const auto lse = mirror.download(device.lse);
      const runtime::Agreement lse_errors =
          testing::compare(host.lse, lse.view, 2e-3, std::ldexp(1.0, -9));
      EXPECT_EQ(lse_errors.mismatches, 0) << "of " << lse_errors.compared << " LSE elements";
      std::printf("%-54s O max abs error %.3g (bound %.3g), LSE %.3g  [%s]\n", name.c_str(),
                  o_errors.max_abs_error, atol, lse_errors.max_abs_error,
                  kernels.front().name().c_str());
      std::fflush(stdout);
    }
  }
}

// `count` values of `dtype` uniform in [-range, range] (the CLI's threaded fill: the timing
// tensors hold tens of millions of elements).
std::vector<std::byte> uniform_values(DType dtype, int64_t count, double range, uint64_t seed) {
  std::vector<std::byte> bytes;
  cli::fill_uniform(bytes, dtype, count, seed, range);
  return bytes;
}

bool fits_sm90(const KernelConfig& config) {
  try {
    codegen::check_supported_sm90(config);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Times `plan` (mean of back-to-back runs after a warmup) and prints TFLOP/s.
void time_plan(Engine& engine, const EnginePlan& plan, const Problem& problem, int64_t b, int64_t h,
               int64_t s, int64_t d, bool causal) {
  jit::Stream stream;
  auto run = [&] { engine.run(plan, problem, stream.handle()); };
  for (int warm = 0; warm < 3; ++warm) run();
  stream.synchronize();
  const int repeats = s >= 8192 ? 10 : 30;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) run();
  stream.synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
  const double pairs = causal ? s * (s + 1) / 2.0 : double(s) * s;
  const double tflops = 4.0 * b * h * pairs * d / seconds / 1e12;
  std::printf("%-9s d%-3lld s%-5lld %-6s %8.3f ms %7.1f TFLOP/s  [%s]\n",
              std::string(to_string(problem.dtype)).c_str(), static_cast<long long>(d),
              static_cast<long long>(s), causal ? "causal" : "none", seconds * 1e3, tflops,
              plan.kernels().front().name().c_str());
  std::fflush(stdout);
}

// FA3-protocol throughput (16k tokens, 2048 hidden) of fp8 e4m3 beside bf16 on the same shapes,
// through the Engine (its kernel choice), mean of back-to-back runs. Prints TFLOP/s; asserts
// only that the runs finish. Opt-in: TILEFMHA_FP8_BENCH=1.
TEST_F(FwdSm90Fp8Gpu, Throughput) {
  if (std::getenv("TILEFMHA_FP8_BENCH") == nullptr) GTEST_SKIP() << "set TILEFMHA_FP8_BENCH=1";
  constexpr int64_t kTokens = 16384, kHidden = 2048;
  std::printf("device: %s\n", jit::GpuContext(0).device_name().c_str());
  for (int64_t d : {128, 256}) {
    for (int64_t s : {1024, 4096, 8192, 16384}) {
      const int64_t b = kTokens / s, h = kHidden / d, count = b * s * h * d;
      for (DType dtype : {DType::fp8_e4m3, DType::bf16}) {
        const bool fp8 = is_fp8(dtype);
        const double range = fp8 ? kCodeRange : 1.0;
        std::vector<std::byte> q = uniform_values(dtype, count, range, 1),
                               k = uniform_values(dtype, count, range, 2),
                               v = uniform_values(dtype, count, range, 3),
                               o(static_cast<size_t>(count * 2));
        for (bool causal : {false, true}) {
          ProblemBuilder builder(Family::fwd);
          builder.dtype(dtype)
              .shape(b, h, h, s, s, d, d)
              .q(bshd(q.data(), dtype, b, s, h, d))
              .k(bshd(k.data(), dtype, b, s, h, d))
              .v(bshd(v.data(), dtype, b, s, h, d))
              .o(bshd(o.data(), DType::bf16, b, s, h, d));
          if (fp8) builder.fp8_scales(per_tensor());
          if (causal) builder.causal();
          const Problem host = builder.build();
          const runtime::DeviceMirror mirror(host);
          const EnginePlan plan = engine_->plan(mirror.device_problem());
          time_plan(*engine_, plan, mirror.device_problem(), b, h, s, d, causal);
          // FP8 tile alternatives: the engine's kernel with one more pipeline stage.
          KernelConfig deeper = plan.kernels().front();
          ++deeper.stages;
          if (fp8 && plan.num_stages() == 1 && fits_sm90(deeper)) {
            EngineOptions options;
            options.kernels = {deeper};
            options.only_listed = true;
            Engine engine(options);
            time_plan(engine, engine.plan(mirror.device_problem()), mirror.device_problem(), b, h,
                      s, d, causal);
          }
        }
      }
    }
  }
}

// Tuning: fp8 and bf16 tiles compiled with each of a list of stage counts and consumer schedules
// (fwd_sm90_shape.h), launched directly on a long problem; prints
// TFLOP/s and the ptxas register and spill report. Opt-in: TILEFMHA_FP8_VARIANTS=1.
TEST_F(FwdSm90Fp8Gpu, TuningVariants) {
  if (std::getenv("TILEFMHA_FP8_VARIANTS") == nullptr)
    GTEST_SKIP() << "set TILEFMHA_FP8_VARIANTS=1";
  struct Variant {
    DType dtype;
    int hdim, block_m, block_n, stages;
    fmha::Sm90Schedule schedule;
    bool persistent = false;
  };
  using S = fmha::Sm90Schedule;
  const DType e4m3 = DType::fp8_e4m3, bf16 = DType::bf16;
  // fp8 hdim 256: the overlap and pingpong schedules hold two blocks' scores beside O's 128
  // accumulators and serialize their wgmmas (ptxas C7512); the serial one does not.
  const std::vector<Variant> variants = {
      {e4m3, 128, 128, 128, 2, S::overlap},  {e4m3, 128, 128, 128, 2, S::serial},
      {e4m3, 128, 128, 128, 3, S::overlap},  {e4m3, 256, 128, 128, 1, S::overlap},
      {e4m3, 256, 128, 128, 1, S::serial},   {e4m3, 256, 128, 128, 2, S::overlap},
      {e4m3, 256, 128, 128, 2, S::serial},   {e4m3, 256, 128, 128, 2, S::pingpong},
      {bf16, 256, 128, 80, 2, S::pingpong},  {bf16, 128, 128, 128, 2, S::pingpong},
      {bf16, 128, 128, 192, 2, S::pingpong}, {bf16, 64, 192, 128, 2, S::pingpong},
      {bf16, 128, 64, 128, 2, S::overlap},
  };

  std::vector<jit::BuildJob> jobs;
  std::vector<KernelConfig> configs;
  for (const Variant& v : variants) {
    KernelConfig c =
        testing::sm90_fwd_config(v.dtype, v.hdim, v.hdim, v.block_m, v.block_n, v.stages);
    c.out_dtype = DType::bf16;
    if (is_fp8(v.dtype)) c.fp8_scale = Fp8ScaleKind::per_tensor;
    c.pad_seqlen_q = c.pad_seqlen_k = true;
    configs.push_back(c);
    jobs.push_back({c.symbol(), codegen::generate_sm90_source(c, {v.schedule, v.persistent})});
  }
  jit::BuildOptions options;
  options.compile.arch = "sm_90a";
  options.compile.extra_arguments.push_back("--ptxas-options=-v");
  options.show_progress = false;
  jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
  ASSERT_TRUE(report.failure_report().empty()) << report.failure_report();
  const std::vector<jit::BuildResult>& built = report.results;  // in job order
  jit::GpuContext context(0);
  for (const auto& [d, dtype] : {std::pair{128, e4m3}, std::pair{256, e4m3}, std::pair{256, bf16},
                                 std::pair{128, bf16}, std::pair{64, bf16}}) {
    const int64_t s = 16384, h = 2048 / d, count = s * h * d;
    const double range = is_fp8(dtype) ? kCodeRange : 1.0;
    std::vector<std::byte> q = uniform_values(dtype, count, range, 1),
                           k = uniform_values(dtype, count, range, 2),
                           v = uniform_values(dtype, count, range, 3),
                           o(static_cast<size_t>(count * 2));
    ProblemBuilder builder(Family::fwd);
    builder.dtype(dtype)
        .shape(1, h, h, s, s, d, d)
        .q(bshd(q.data(), dtype, 1, s, h, d))
        .k(bshd(k.data(), dtype, 1, s, h, d))
        .v(bshd(v.data(), dtype, 1, s, h, d))
        .o(bshd(o.data(), DType::bf16, 1, s, h, d));
    if (is_fp8(dtype)) builder.fp8_scales(per_tensor());
    const Problem host = builder.build();
    const testing::DeviceProblem device(host);
    for (size_t n = 0; n < variants.size(); ++n) {
      if (variants[n].hdim != d || variants[n].dtype != dtype) continue;
      const jit::LoadedModule module(built[n].cubin);
      const KernelConfig& c = configs[n];
      const codegen::Sm90Variant variant{variants[n].schedule, variants[n].persistent};
      const fmha::Sm90FwdParams params =
          runtime::make_fwd_sm90_params(device.problem(), device.indices(), c);
      const jit::LaunchShape shape =
          codegen::launch_shape_sm90(c, device.problem(), variant, context.multiprocessor_count());
      auto launch = [&] {
        fmha::Sm90FwdParams argument = params;
        runtime::bind_sm90_grid(argument, c, shape.grid[0]);
        void* arguments[] = {&argument};
        jit::launch_kernel(module.function(c.symbol()), shape, arguments);
      };
      for (int warm = 0; warm < 3; ++warm) launch();
      context.synchronize();
      const int repeats = 10;
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < repeats; ++r) launch();
      context.synchronize();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
      std::printf("%-9s d%d m%d n%d s%d schedule %d%s %7.1f TFLOP/s\n",
                  std::string(to_string(dtype)).c_str(), d, c.block_m, c.block_n, c.stages,
                  static_cast<int>(variants[n].schedule),
                  variants[n].persistent ? " persistent" : "",
                  4.0 * h * double(s) * s * d / seconds / 1e12);
      const testing::PtxasReport report = testing::ptxas_report(built[n].note);
      std::printf("    registers %d, spill bytes %d\n", report.registers, report.spill_bytes);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace tilefmha
