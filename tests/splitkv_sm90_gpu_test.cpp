// The split-KV mode of the sm90_ws kernel (family fwd_splitkv) on a Hopper GPU: JIT-compiled from
// generated sources, run on device copies of fresh random problems whose fp32 partials are
// poisoned (all-ones bytes: NaN) beforehand, and compared element by element with
// reference::forward_splitkv: every split's O (normalized by its own sum) and LSE, including
// splits that see no key (O = 0, LSE = -inf). The host-side half (problems, maps, launch shapes,
// the reference writing every partial) runs everywhere; the GPU half is skipped without a
// driver, a GPU, NVRTC, or on a GPU other than sm_90. An opt-in decode throughput table
// (TILEFMHA_SM90_BENCH=1) reports the split stage's K/V bandwidth per split count, never
// asserting a time.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "codegen/fwd_sm90.hpp"
#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/module.hpp"
#include "runtime/fwd_sm90_params.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_problem.hpp"
#include "support/kernel_configs.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {
namespace {

using testing::clobbered_padding;
using testing::compare;
using testing::DeviceProblem;
using testing::Dims;
using testing::gpu_skip_reason;
using testing::kUnwritten;
using testing::QkvLayout;
using testing::TensorPool;

// data/arch/sm90.json's fwd_splitkv tiles: one consumer warpgroup of 64 rows, block_n 128 (64 at
// hdim 256), padded sequences (TMA bounds-checks them at no cost).
KernelConfig splitkv_config(DType dtype, int hdim, bool pack_gqa = false,
                            MaskKind mask = MaskKind::none, Mode mode = Mode::batch) {
  KernelConfig c =
      testing::sm90_fwd_config(dtype, hdim, hdim, 64, hdim == 256 ? 64 : 128, /*stages=*/2);
  c.family = Family::fwd_splitkv;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  c.pack_gqa = pack_gqa;
  c.mask = mask;
  c.mode = mode;
  return c;
}

// Partials [num_splits, batch, nhead_q, seq, hdim_v] and [num_splits, batch, nhead_q, seq]
// (group mode: batch 1 and the packed tokens), preset to NaN. Gapped: every dim followed by unused
// elements (strides stay even, as the kernel's paired float stores need), whose poison must
// survive the launch.
void add_partials(TensorPool& pool, Problem& p, int64_t num_splits, bool gapped = false) {
  const int64_t batch = p.mode == Mode::group ? 1 : p.batch;
  const int64_t seq = p.mode == Mode::group ? p.total_q() : p.seqlen_q;
  const int64_t heads = p.nhead_q, dim = p.hdim_v;
  p.split.num_splits = num_splits;
  if (!gapped) {
    p.split.o_acc = pool.filled(DType::fp32, {num_splits, batch, heads, seq, dim}, kUnwritten);
    p.split.lse_acc = pool.filled(DType::fp32, {num_splits, batch, heads, seq}, kUnwritten);
    return;
  }
  const int64_t seq_stride = dim + 8, head_stride = seq * seq_stride + 4;
  const int64_t batch_stride = heads * head_stride + 2, split_stride = batch * batch_stride + 6;
  p.split.o_acc =
      pool.strided(DType::fp32, num_splits * split_stride, {num_splits, batch, heads, seq, dim},
                   {split_stride, batch_stride, head_stride, seq_stride, 1}, 0, 1);
  testing::fill_logical(p.split.o_acc, kUnwritten);
  const int64_t lse_head = seq + 3, lse_batch = heads * lse_head + 1,
                lse_split = batch * lse_batch + 5;
  p.split.lse_acc =
      pool.strided(DType::fp32, num_splits * lse_split, {num_splits, batch, heads, seq},
                   {lse_split, lse_batch, lse_head, 1}, 0, 1);
  testing::fill_logical(p.split.lse_acc, kUnwritten);
}

// A fwd_splitkv problem: Q, K, V (bshd) and the partials; no O or LSE view, which the kernel
// must not need.
ProblemBuilder splitkv_batch(TensorPool& pool, DType t, const Dims& d) {
  ProblemBuilder builder(Family::fwd_splitkv);
  builder.dtype(t)
      .shape(d.batch, d.nhead_q, d.nhead_k, d.seqlen_q, d.seqlen_k, d.hdim_q, d.hdim_v)
      .q(pool.qkv(t, QkvLayout::bshd, d.batch, d.seqlen_q, d.nhead_q, d.hdim_q))
      .k(pool.qkv(t, QkvLayout::bshd, d.batch, d.seqlen_k, d.nhead_k, d.hdim_q))
      .v(pool.qkv(t, QkvLayout::bshd, d.batch, d.seqlen_k, d.nhead_k, d.hdim_v));
  return builder;
}

Problem with_splits(TensorPool& pool, const ProblemBuilder& builder, int64_t num_splits,
                    bool gapped = false) {
  Problem p = builder.peek();
  add_partials(pool, p, num_splits, gapped);
  validate(p);
  return p;
}

struct Case {
  std::string name;
  KernelConfig config;
  std::function<Problem(TensorPool&)> make;
  fmha::Sm90Schedule schedule = fmha::Sm90Schedule::overlap;
  // The plan's two-stage form: a fwd problem (with O and LSE, which must stay untouched) whose
  // partials come in separately as make_fwd_sm90_params' `split`.
  bool two_stage = false;
  bool gapped = false;  // partials in gapped memory whose gaps must stay untouched
};

std::vector<Case> cases() {
  using S = fmha::Sm90Schedule;
  const DType bf16 = DType::bf16, fp16 = DType::fp16;
  std::vector<Case> all;
  // Decode: 32 query heads over 8 KV heads, GQA groups packed into one tile.
  all.push_back(
      {"bf16_d128_decode_packed_sk8192_16_splits", splitkv_config(bf16, 128, true),
       [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, bf16, {1, 32, 8, 1, 8192, 128, 128}), 16);
       }});
  all.push_back(
      {"fp16_d128_decode_packed_sq4_ragged_sk1000_3_splits", splitkv_config(fp16, 128, true),
       [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, fp16, {2, 32, 8, 4, 1000, 128, 128}), 3);
       }});
  // 1000 keys in 16 splits: chunks of 128, so splits 8..15 see no key (O 0, LSE -inf).
  all.push_back(
      {"bf16_d64_decode_packed_sq16_sk1000_16_splits_empty_ones", splitkv_config(bf16, 64, true),
       [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, bf16, {2, 32, 8, 16, 1000, 64, 64}), 16);
       }});
  all.push_back({"bf16_d128_decode_packed_sq16_causal_bottom_right_3_splits",
                 splitkv_config(bf16, 128, true, MaskKind::causal), [=](TensorPool& pool) {
                   return with_splits(pool,
                                      splitkv_batch(pool, bf16, {2, 32, 8, 16, 1000, 128, 128})
                                          .causal(MaskAlign::bottom_right),
                                      3);
                 }});
  // The same decode shapes unpacked (one query head per tile).
  all.push_back(
      {"fp16_d64_decode_unpacked_sk8192_3_splits", splitkv_config(fp16, 64), [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, fp16, {2, 32, 8, 1, 8192, 64, 64}), 3);
       }});
  all.push_back(
      {"bf16_d128_decode_unpacked_sq16_sk1000_1_split", splitkv_config(bf16, 128),
       [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, bf16, {1, 32, 8, 16, 1000, 128, 128}), 1);
       }});
  all.push_back(
      {"fp16_d128_decode_unpacked_sq4_sk1000_16_splits_serial", splitkv_config(fp16, 128),
       [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, fp16, {1, 32, 8, 4, 1000, 128, 128}), 16);
       },
       S::serial});
  // hdim 256: 64-key blocks.
  all.push_back(
      {"bf16_d256_decode_unpacked_sk8192_16_splits", splitkv_config(bf16, 256),
       [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, bf16, {1, 32, 8, 1, 8192, 256, 256}), 16);
       }});
  all.push_back(
      {"fp16_d256_decode_packed_sq4_sk1000_3_splits", splitkv_config(fp16, 256, true),
       [=](TensorPool& pool) {
         return with_splits(pool, splitkv_batch(pool, fp16, {2, 32, 8, 4, 1000, 256, 256}), 3);
       }});
  // Prefill-like rows: several query blocks per head, each split seeing part of the diagonal.
  all.push_back({"fp16_d128_prefill_causal_bottom_right_3_splits",
                 splitkv_config(fp16, 128, false, MaskKind::causal), [=](TensorPool& pool) {
                   return with_splits(pool,
                                      splitkv_batch(pool, fp16, {2, 4, 2, 300, 700, 128, 128})
                                          .causal(MaskAlign::bottom_right),
                                      3);
                 }});
  // Top-left causal: the first query blocks' rows see no key of the later splits.
  all.push_back({"bf16_d64_prefill_causal_top_left_3_splits_gapped_partials",
                 splitkv_config(bf16, 64, false, MaskKind::causal),
                 [=](TensorPool& pool) {
                   return with_splits(
                       pool, splitkv_batch(pool, bf16, {2, 4, 4, 400, 400, 64, 64}).causal(), 3,
                       /*gapped=*/true);
                 },
                 S::overlap, false, true});
  // A window whose sink tokens (300) reach into the second and third splits (chunks of 128):
  // sink blocks that start past block 0.
  all.push_back({"fp16_d128_window_sinks_across_splits_8_splits",
                 splitkv_config(fp16, 128, false, MaskKind::window), [=](TensorPool& pool) {
                   return with_splits(pool,
                                      splitkv_batch(pool, fp16, {1, 2, 2, 64, 1000, 128, 128})
                                          .window(100, 0, MaskAlign::bottom_right)
                                          .sink_tokens(300),
                                      8);
                 }});
  all.push_back({"bf16_d128_alibi_softcap_3_splits",
                 [] {
                   KernelConfig c = splitkv_config(DType::bf16, 128);
                   c.bias = BiasKind::alibi;
                   c.softcap = true;
                   return c;
                 }(),
                 [=](TensorPool& pool) {
                   return with_splits(pool,
                                      splitkv_batch(pool, bf16, {2, 8, 2, 16, 1000, 128, 128})
                                          .softcap(4.0)
                                          .alibi(pool.uniform(DType::fp32, {8}, 0.01, 0.2)),
                                      3);
                 }});
  // Group mode with an empty sequence (query lengths 150, 0, 401, 1 over keys 100, 36, 600, 1):
  // the last sequence's one key leaves its other splits empty.
  all.push_back({"fp16_d64_group_causal_bottom_right_empty_sequence_3_splits",
                 splitkv_config(fp16, 64, false, MaskKind::causal, Mode::group),
                 [=](TensorPool& pool) {
                   ProblemBuilder builder(Family::fwd_splitkv);
                   builder.dtype(fp16)
                       .shape(1, 4, 2, 0, 0, 64, 64)
                       .group({0, 150, 150, 551, 552}, {0, 100, 136, 736, 737})
                       .q(pool.uniform(fp16, {1, 552, 4, 64}, -1, 1))
                       .k(pool.uniform(fp16, {1, 737, 2, 64}, -1, 1))
                       .v(pool.uniform(fp16, {1, 737, 2, 64}, -1, 1))
                       .causal(MaskAlign::bottom_right);
                   return with_splits(pool, builder, 3);
                 }});
  all.push_back({"bf16_d128_group_16_splits",
                 splitkv_config(bf16, 128, false, MaskKind::none, Mode::group),
                 [=](TensorPool& pool) {
                   ProblemBuilder builder(Family::fwd_splitkv);
                   builder.dtype(bf16)
                       .shape(1, 8, 2, 0, 0, 128, 128)
                       .group({0, 3, 3, 19}, {0, 2000, 2000, 2100})
                       .q(pool.uniform(bf16, {1, 19, 8, 128}, -1, 1))
                       .k(pool.uniform(bf16, {1, 2100, 2, 128}, -1, 1))
                       .v(pool.uniform(bf16, {1, 2100, 2, 128}, -1, 1));
                   return with_splits(pool, builder, 16);
                 }});
  // Per-batch key lengths (a KV cache), one of them empty: unpacked and packed.
  all.push_back({"fp16_d128_key_lengths_unpacked_causal_bottom_right_3_splits",
                 splitkv_config(fp16, 128, false, MaskKind::causal), [=](TensorPool& pool) {
                   return with_splits(pool,
                                      splitkv_batch(pool, fp16, {3, 4, 2, 16, 1000, 128, 128})
                                          .key_lengths({1000, 129, 0})
                                          .causal(MaskAlign::bottom_right),
                                      3);
                 }});
  all.push_back(
      {"bf16_d64_key_lengths_packed_decode_16_splits", splitkv_config(bf16, 64, true),
       [=](TensorPool& pool) {
         return with_splits(
             pool,
             splitkv_batch(pool, bf16, {3, 16, 2, 1, 8192, 64, 64}).key_lengths({8192, 1000, 0}),
             16);
       }});
  // The two-stage form: a fwd problem with O and LSE, partials bound separately.
  all.push_back(
      {"bf16_d128_two_stage_fwd_problem_packed_3_splits", splitkv_config(bf16, 128, true),
       [=](TensorPool& pool) {
         Problem p =
             testing::batch_problem(pool, Family::fwd, bf16, {2, 16, 4, 2, 1000, 128, 128}).build();
         add_partials(pool, p, 3);
         return p;
       },
       S::overlap, true});
  return all;
}

// The problem the reference computes: the case's partials, as a fwd_splitkv problem.
Problem reference_problem(const Problem& p) {
  Problem reference = p;
  reference.family = Family::fwd_splitkv;
  return reference;
}

int64_t count_empty_splits(const Problem& p) {
  int64_t empty = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t keys = p.key_length(b);
    const int64_t chunk = splitkv_chunk(keys, p.split.num_splits);
    for (int64_t s = 0; s < p.split.num_splits; ++s) empty += s * chunk >= keys;
  }
  return empty;
}

// Host-side half of every case, run with or without a GPU: the problems are valid, the config
// is supported, the maps need no O, the grid counts every split, and the reference writes every
// partial (so a poisoned element the kernel forgets cannot pass).
TEST(SplitKvSm90GpuCases, ProblemsMapsLaunchShapesAndReferenceAreValid) {
  int n = 0;
  for (const Case& test : cases()) {
    SCOPED_TRACE(test.name);
    TensorPool pool(2000 + n++);
    const Problem p = test.make(pool);
    EXPECT_NO_THROW(validate(p));
    EXPECT_NO_THROW(codegen::check_supported_sm90(test.config));
    EXPECT_NO_THROW(codegen::generate_sm90_source(test.config));
    const runtime::Sm90TensorMapSpecs specs = runtime::sm90_tensor_map_specs(p, test.config);
    EXPECT_TRUE(specs.o.dims.empty());
    // Packed cases are ones the dispatcher would pack; unpacked ones test the other form.
    if (test.config.pack_gqa) EXPECT_TRUE(codegen::sm90_pack_gqa_pays(test.config, p));
    const codegen::Sm90Variant variant{test.schedule, false};
    const jit::LaunchShape shape =
        codegen::launch_shape_sm90(test.config, p, variant, 0, p.split.num_splits);
    const int64_t group = test.config.pack_gqa ? p.nhead_q / p.nhead_k : 1;
    const int64_t rows = test.config.block_m / group;
    const int64_t heads = test.config.pack_gqa ? p.nhead_k : p.nhead_q;
    EXPECT_EQ(shape.grid[0], static_cast<unsigned>((p.seqlen_q + rows - 1) / rows * heads *
                                                   p.batch * p.split.num_splits));
    EXPECT_EQ(shape.block[0], 256u);
    EXPECT_LE(shape.dynamic_shared_bytes, 232448u);
    if (!test.two_stage) {
      EXPECT_TRUE(p.o.empty());
      EXPECT_EQ(codegen::launch_shape_sm90(test.config, p, 0).grid[0], shape.grid[0]);
    }

    const Problem reference = reference_problem(p);
    reference::forward_splitkv(reference);
    int64_t unwritten = 0;
    for_each_element(p.split.o_acc, [&](int64_t, int64_t offset) {
      unwritten += std::isnan(numeric::load(p.split.o_acc.data, DType::fp32, offset));
    });
    for_each_element(p.split.lse_acc, [&](int64_t, int64_t offset) {
      unwritten += std::isnan(numeric::load(p.split.lse_acc.data, DType::fp32, offset));
    });
    EXPECT_EQ(unwritten, 0);
  }
}

// Device copies of a problem's partials: poisoned buffers with the host views' shapes and
// strides.
class DevicePartials {
 public:
  explicit DevicePartials(const SplitKv& host) : split_(host) {
    split_.o_acc = mirror(host.o_acc);
    split_.lse_acc = mirror(host.lse_acc);
  }

  const SplitKv& split() const { return split_; }

  runtime::DeviceMirror::HostBytes download(const TensorView& device) const {
    for (size_t n = 0; n < buffers_.size(); ++n) {
      if (reinterpret_cast<void*>(buffers_[n]->address()) != device.data) continue;
      runtime::DeviceMirror::HostBytes host{
          std::vector<std::byte>(static_cast<size_t>(buffers_[n]->bytes())), device};
      buffers_[n]->copy_to_host(host.bytes);
      host.view.data = host.bytes.data();
      host.view.space = MemorySpace::host;
      return host;
    }
    ADD_FAILURE() << "not a partials buffer";
    return {};
  }

 private:
  TensorView mirror(const TensorView& host) {
    auto buffer = std::make_unique<jit::DeviceBuffer>(host.extent() * dtype_size(host.dtype));
    buffer->fill_bytes(runtime::kPoisonByte);
    TensorView device = host;
    device.data = reinterpret_cast<void*>(buffer->address());
    device.space = MemorySpace::device;
    buffers_.push_back(std::move(buffer));
    return device;
  }

  SplitKv split_;
  std::vector<std::unique_ptr<jit::DeviceBuffer>> buffers_;
};

// Every byte of a download still the poison.
int64_t written_bytes(const runtime::DeviceMirror::HostBytes& download) {
  int64_t written = 0;
  for (std::byte b : download.bytes) written += b != std::byte{runtime::kPoisonByte};
  return written;
}

class SplitKvSm90Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = gpu_skip_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    context_ = std::make_unique<jit::GpuContext>(0);
    if (context_->compute_capability() != 90)
      GTEST_SKIP() << "sm90_ws needs an sm_90 GPU, found sm_" << context_->compute_capability();
  }

  std::unique_ptr<jit::GpuContext> context_;
};

TEST_F(SplitKvSm90Gpu, MatchesReference) {
  const std::vector<Case> all = cases();
  std::vector<jit::BuildJob> jobs;
  for (const Case& c : all)
    jobs.push_back(
        {c.config.symbol() + "_" + std::to_string(int(c.schedule)),
         codegen::generate_sm90_source(c.config, codegen::Sm90Variant{c.schedule, false})});
  jit::BuildOptions options;
  options.compile.arch = "sm_90a";
  options.compile.extra_arguments = {"--ptxas-options=-v"};
  options.show_progress = false;
  const jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
  ASSERT_TRUE(report.failure_report().empty()) << report.failure_report();
  ASSERT_EQ(report.results.size(), all.size());
  std::printf("device: %s (sm_%d)\n", context_->device_name().c_str(),
              context_->compute_capability());

  for (size_t n = 0; n < all.size(); ++n) {
    const Case& test = all[n];
    SCOPED_TRACE(test.name);
    const jit::BuildResult& built = report.results[n];
    ASSERT_TRUE(built.ok) << built.error;
    TensorPool pool(std::random_device{}());
    const Problem host = test.make(pool);
    reference::forward_splitkv(reference_problem(host));
    const bool fp16 = host.dtype == DType::fp16;

    const jit::LoadedModule module(built.cubin);
    const DeviceProblem device(host);  // Q, K, V (and a poisoned O in the two-stage form)
    const DevicePartials partials(host.split);
    Problem launch_problem = device.problem();
    launch_problem.split = partials.split();
    const fmha::Sm90FwdParams params =
        test.two_stage
            ? runtime::make_fwd_sm90_params(launch_problem, device.indices(), test.config,
                                            &partials.split())
            : runtime::make_fwd_sm90_params(launch_problem, device.indices(), test.config);
    const codegen::Sm90Variant variant{test.schedule, false};
    const jit::LaunchShape shape =
        codegen::launch_shape_sm90(test.config, launch_problem, variant, 0, host.split.num_splits);
    fmha::Sm90FwdParams argument = params;
    runtime::bind_sm90_grid(argument, test.config, shape.grid[0]);
    std::printf("%-64s launching %u CTAs\n", test.name.c_str(), shape.grid[0]);
    std::fflush(stdout);  // a hung kernel must not take the log of the earlier cases with it
    void* arguments[] = {&argument};
    jit::launch_kernel(module.function(test.config.symbol()), shape, arguments);
    context_->synchronize();

    const auto o_acc = partials.download(partials.split().o_acc);
    const runtime::Agreement o_errors =
        compare(host.split.o_acc, o_acc.view, fp16 ? 2e-3 : 1e-2, fp16 ? 1e-2 : 2e-2);
    EXPECT_EQ(o_errors.mismatches, 0) << "of " << o_errors.compared << " partial O elements";
    const auto lse_acc = partials.download(partials.split().lse_acc);
    const runtime::Agreement lse_errors = compare(host.split.lse_acc, lse_acc.view, 1e-3, 1e-4);
    EXPECT_EQ(lse_errors.mismatches, 0) << "of " << lse_errors.compared << " partial LSE elements";
    if (test.gapped) {
      EXPECT_EQ(clobbered_padding(o_acc), 0) << "bytes written outside o_acc";
      EXPECT_EQ(clobbered_padding(lse_acc), 0) << "bytes written outside lse_acc";
    }
    if (test.two_stage) {
      EXPECT_EQ(written_bytes(device.download(device.problem().o)), 0) << "O was written";
      EXPECT_EQ(written_bytes(device.download(device.problem().lse)), 0) << "LSE was written";
    }
    std::printf("%-64s O max abs error %.3g, LSE %.3g (%lld empty splits)\n", test.name.c_str(),
                o_errors.max_abs_error, lse_errors.max_abs_error,
                static_cast<long long>(count_empty_splits(host)));
    // Registers and spills of the entry function.
    const std::string& note = built.note;
    for (size_t begin = 0; begin < note.size();) {
      size_t end = note.find('\n', begin);
      if (end == std::string::npos) end = note.size();
      const std::string line = note.substr(begin, end - begin);
      if (line.find("spill") != std::string::npos || line.find("Used") != std::string::npos)
        std::printf("    %s\n", line.c_str());
      begin = end + 1;
    }
    std::fflush(stdout);
  }
}

// Random 16-bit values in [-1, 1) straight as bit patterns: decode caches of 128k keys hold too
// many elements for the exact per-element rounding of TensorPool.
std::vector<uint16_t> random_bits(int64_t count, uint64_t seed, DType dtype) {
  std::vector<uint16_t> values(static_cast<size_t>(count));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t& value : values) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    const float x = static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    value = dtype == DType::bf16 ? numeric::float_to_bf16(x) : numeric::float_to_half(x);
  }
  return values;
}

// The split stage of GQA decode (packed, one query or a 16-token chunk, bottom-right causal for
// the chunk) per split count: mean of 20 launches after 3 warm-ups, and the K/V bytes a step must
// read over that time. The combine stage is not included.
TEST_F(SplitKvSm90Gpu, DecodeThroughput) {
  if (std::getenv("TILEFMHA_SM90_BENCH") == nullptr) GTEST_SKIP() << "set TILEFMHA_SM90_BENCH=1";
  struct Shape {
    int64_t batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim;
  };
  const Shape shapes[] = {{1, 32, 8, 1, 131072, 128}, {1, 32, 8, 16, 131072, 128},
                          {1, 32, 8, 1, 131072, 64},  {16, 32, 4, 1, 8192, 128},
                          {16, 32, 4, 1, 8192, 64},   {1, 64, 8, 1, 32768, 256}};
  const int64_t split_counts[] = {1, 2, 4, 8, 16, 32, 64};
  std::vector<jit::BuildJob> jobs;
  std::vector<KernelConfig> configs;
  for (int hdim : {64, 128, 256}) {
    for (MaskKind mask : {MaskKind::none, MaskKind::causal}) {
      configs.push_back(splitkv_config(DType::bf16, hdim, true, mask));
      jobs.push_back({configs.back().symbol(), codegen::generate_sm90_source(configs.back())});
    }
  }
  jit::BuildOptions options;
  options.compile.arch = "sm_90a";
  options.show_progress = false;
  const jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
  ASSERT_TRUE(report.failure_report().empty()) << report.failure_report();
  std::vector<jit::LoadedModule> modules;
  for (const jit::BuildResult& result : report.results) modules.emplace_back(result.cubin);
  std::printf("device: %s, %d SMs\n", context_->device_name().c_str(),
              context_->multiprocessor_count());

  const DType t = DType::bf16;
  for (const Shape& s : shapes) {
    const bool causal = s.seqlen_q > 1;
    size_t k = 0;
    while (configs[k].hdim_q != s.hdim || (configs[k].mask == MaskKind::causal) != causal) ++k;
    const int64_t q_count = s.batch * s.seqlen_q * s.nhead_q * s.hdim;
    const int64_t kv_count = s.batch * s.seqlen_k * s.nhead_k * s.hdim;
    std::vector<uint16_t> q = random_bits(q_count, 1, t), kc = random_bits(kv_count, 2, t),
                          vc = random_bits(kv_count, 3, t);
    for (int64_t splits : split_counts) {
      std::vector<float> o_acc(
          static_cast<size_t>(splits * s.batch * s.nhead_q * s.seqlen_q * s.hdim));
      std::vector<float> lse_acc(static_cast<size_t>(splits * s.batch * s.nhead_q * s.seqlen_q));
      ProblemBuilder builder(Family::fwd_splitkv);
      builder.dtype(t)
          .shape(s.batch, s.nhead_q, s.nhead_k, s.seqlen_q, s.seqlen_k, s.hdim, s.hdim)
          .q(bshd(q.data(), t, s.batch, s.seqlen_q, s.nhead_q, s.hdim))
          .k(bshd(kc.data(), t, s.batch, s.seqlen_k, s.nhead_k, s.hdim))
          .v(bshd(vc.data(), t, s.batch, s.seqlen_k, s.nhead_k, s.hdim))
          .splits(splits,
                  contiguous_view(o_acc.data(), DType::fp32,
                                  {splits, s.batch, s.nhead_q, s.seqlen_q, s.hdim}),
                  contiguous_view(lse_acc.data(), DType::fp32,
                                  {splits, s.batch, s.nhead_q, s.seqlen_q}));
      if (causal) builder.causal(MaskAlign::bottom_right);
      const Problem host = builder.build();
      const DeviceProblem device(host);
      const DevicePartials partials(host.split);
      Problem launch_problem = device.problem();
      launch_problem.split = partials.split();
      fmha::Sm90FwdParams params =
          runtime::make_fwd_sm90_params(launch_problem, device.indices(), configs[k]);
      const jit::LaunchShape shape = codegen::launch_shape_sm90(configs[k], launch_problem, 0);
      runtime::bind_sm90_grid(params, configs[k], shape.grid[0]);
      void* arguments[] = {&params};
      auto run = [&] {
        jit::launch_kernel(modules[k].function(configs[k].symbol()), shape, arguments);
      };
      for (int warm = 0; warm < 3; ++warm) run();
      context_->synchronize();
      constexpr int kRepeats = 20;
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < kRepeats; ++r) run();
      context_->synchronize();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
          kRepeats;
      const double kv_bytes = 2.0 * kv_count * 2;
      std::printf(
          "b%-3lld hq%-3lld hk%-2lld sq%-3lld sk%-7lld d%-4lld %-6s splits %-3lld CTAs %-5u "
          "%8.1f us %7.0f GB/s\n",
          static_cast<long long>(s.batch), static_cast<long long>(s.nhead_q),
          static_cast<long long>(s.nhead_k), static_cast<long long>(s.seqlen_q),
          static_cast<long long>(s.seqlen_k), static_cast<long long>(s.hdim),
          causal ? "causal" : "none", static_cast<long long>(splits), shape.grid[0], seconds * 1e6,
          kv_bytes / seconds / 1e9);
      std::fflush(stdout);
      const auto lse = partials.download(partials.split().lse_acc);
      int64_t nan = 0;
      for_each_element(lse.view, [&](int64_t, int64_t offset) {
        nan += std::isnan(numeric::load(lse.view.data, DType::fp32, offset));
      });
      EXPECT_EQ(nan, 0) << "splits " << splits;
    }
  }
}

}  // namespace
}  // namespace tilefmha
