// Split-KV on the portable path, on a GPU: the sm80_mma kernel in its fwd_splitkv form and the
// combine kernel, JIT-compiled from generated sources and run on device copies of fresh random
// problems whose outputs are poisoned (all-ones bytes: NaN) beforehand.
//   * the split kernel's partials (every split's O normalized by its own sum, and its LSE; O = 0
//     and LSE = -inf for a split that sees no key) against reference::forward_splitkv;
//   * the combine kernel, fed the reference's partials, against reference::splitkv_combine;
//   * split kernel then combine kernel against reference::forward (O and LSE);
//   * the combine kernel alone on random partials with masked rows and garbage (NaN) partials
//     behind -inf LSEs, with and without a sink logit, 16-bit partials, several passes of splits.
// The host-side half (problems, parameters, launch shapes) runs everywhere; the GPU half is
// skipped without a driver, a GPU or NVRTC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "codegen/combine.hpp"
#include "codegen/fwd_sm80.hpp"
#include "core/numeric.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/module.hpp"
#include "runtime/combine_params.hpp"
#include "runtime/fwd_params.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_problem.hpp"
#include "support/kernel_configs.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {
namespace {

using testing::compare;
using testing::DeviceProblem;
using testing::Dims;
using testing::gpu_skip_reason;
using testing::kUnwritten;
using testing::TensorPool;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---- configs ---------------------------------------------------------------------------------

// data/arch/sm90.json's sm80_mma fwd_splitkv tiles: block_m 64 on 4 warps, block_n 128 (hdim
// 64) or 64 (hdim 128); padded sequences for ragged lengths.
KernelConfig split_config(DType dtype, int hdim, MaskKind mask = MaskKind::none,
                          Mode mode = Mode::batch) {
  KernelConfig c = testing::sm80_fwd_config(dtype, hdim, hdim, 64, hdim <= 64 ? 128 : 64, 4, 2);
  c.family = Family::fwd_splitkv;
  c.arch = Arch::sm80;
  c.mask = mask;
  c.mode = mode;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  return c;
}

// The enumerated combine tile: 16 rows, 128 splits a pass, 4 warps; out_dtype follows dtype.
KernelConfig combine_config(DType dtype, int hdim_v, bool lse, bool sink_logit,
                            Mode mode = Mode::batch) {
  KernelConfig c;
  c.family = Family::fwd_splitkv_combine;
  c.pipeline = Pipeline::combine;
  c.arch = Arch::sm80;
  c.dtype = c.out_dtype = dtype;
  c.mode = mode;
  c.hdim_q = c.hdim_v = hdim_v;
  c.block_m = 16;
  c.block_n = 128;
  c.block_k = hdim_v;
  c.warps = 4;
  c.stages = 1;
  c.pad_seqlen_q = c.pad_seqlen_k = c.pad_hdim_q = c.pad_hdim_v = true;
  c.lse = lse;
  c.sink_logit = sink_logit;
  return c;
}

// The combine kernel that finishes `problem` (its dtype, head dim and epilogue traits).
KernelConfig combine_for(const Problem& problem, int kernel_hdim_v = 0) {
  return combine_config(problem.out_dtype,
                        kernel_hdim_v > 0 ? kernel_hdim_v : static_cast<int>(problem.hdim_v),
                        problem.return_lse, !problem.sink_logits.empty(), problem.mode);
}

// ---- problems --------------------------------------------------------------------------------

int64_t rows_batch(const Problem& p) {
  return p.mode == Mode::group ? 1 : p.batch;
}
int64_t rows_seq(const Problem& p) {
  return p.mode == Mode::group ? p.total_q() : p.seqlen_q;
}

// Partials of `p` preset to NaN: contiguous, or gapped (every dim followed by unused elements,
// strides kept even as the split kernel's paired float stores need) so that a write outside the
// view shows up.
SplitKv make_partials(TensorPool& pool, const Problem& p, int64_t num_splits, bool gapped,
                      DType o_dtype = DType::fp32) {
  const int64_t batch = rows_batch(p), seq = rows_seq(p), heads = p.nhead_q, dim = p.hdim_v;
  SplitKv split;
  split.num_splits = num_splits;
  if (!gapped) {
    split.o_acc = pool.filled(o_dtype, {num_splits, batch, heads, seq, dim}, kUnwritten);
    split.lse_acc = pool.filled(DType::fp32, {num_splits, batch, heads, seq}, kUnwritten);
    return split;
  }
  const int64_t seq_stride = dim + 8, head_stride = seq * seq_stride + 4;
  const int64_t batch_stride = heads * head_stride + 2, split_stride = batch * batch_stride + 6;
  split.o_acc =
      pool.strided(o_dtype, num_splits * split_stride, {num_splits, batch, heads, seq, dim},
                   {split_stride, batch_stride, head_stride, seq_stride, 1}, 0, 1);
  testing::fill_logical(split.o_acc, kUnwritten);
  const int64_t lse_head = seq + 3, lse_batch = heads * lse_head + 1;
  const int64_t lse_split = batch * lse_batch + 5;
  split.lse_acc = pool.strided(DType::fp32, num_splits * lse_split, {num_splits, batch, heads, seq},
                               {lse_split, lse_batch, lse_head, 1}, 0, 1);
  testing::fill_logical(split.lse_acc, kUnwritten);
  return split;
}

// The three problems of one split forward: the forward itself (O and LSE by
// reference::forward), its partials (fwd_splitkv) and their combine (fwd_splitkv_combine, own
// O and LSE), all over the same inputs.
struct SplitProblems {
  Problem forward, partials, combine;
};

SplitProblems split_problems(TensorPool& pool, const Problem& forward, int64_t num_splits,
                             bool gapped) {
  SplitProblems out{forward, forward, forward};
  out.partials.family = Family::fwd_splitkv;
  out.partials.split = make_partials(pool, forward, num_splits, gapped);
  validate(out.partials);
  out.combine = out.partials;
  out.combine.family = Family::fwd_splitkv_combine;
  out.combine.o = pool.filled(
      forward.out_dtype, {rows_batch(forward), rows_seq(forward), forward.nhead_q, forward.hdim_v},
      kUnwritten);
  if (forward.return_lse)
    out.combine.lse = pool.filled(
        DType::fp32, {rows_batch(forward), forward.nhead_q, rows_seq(forward)}, kUnwritten);
  validate(out.combine);
  return out;
}

ProblemBuilder batch(TensorPool& pool, DType dtype, Dims d) {
  return testing::batch_problem(pool, Family::fwd, dtype, d);
}

struct Case {
  std::string name;
  KernelConfig split;
  int64_t num_splits;
  std::function<Problem(TensorPool&)> make;  // a fwd problem with host views
  bool gapped = false;                       // partials in gapped memory
};

std::vector<Case> cases() {
  const DType bf16 = DType::bf16, fp16 = DType::fp16;
  std::vector<Case> all;
  // Top-left causal over 700 keys: the rows (< 100) see only split 0; splits 1 and 2 are empty.
  all.push_back({"bf16_d128_causal_top_left_3_splits", split_config(bf16, 128, MaskKind::causal), 3,
                 [=](TensorPool& pool) {
                   return batch(pool, bf16, {2, 4, 4, 100, 700, 128, 128}).causal().build();
                 }});
  // 1000 keys in 7 splits: chunks of 256, so splits 4..6 lie past the keys. GQA 8 over 2.
  all.push_back({"fp16_d64_causal_bottom_right_gqa_7_splits_gapped",
                 split_config(fp16, 64, MaskKind::causal), 7,
                 [=](TensorPool& pool) {
                   return batch(pool, fp16, {2, 8, 2, 37, 1000, 64, 64})
                       .causal(MaskAlign::bottom_right)
                       .scale(0.5)
                       .build();
                 },
                 true});
  all.push_back({"bf16_d64_one_split", split_config(bf16, 64), 1, [=](TensorPool& pool) {
                   return batch(pool, bf16, {2, 2, 1, 70, 300, 64, 64}).build();
                 }});
  // Group mode with an empty sequence (query lengths 40, 0, 130, 1 over keys 300, 36, 364, 400)
  // and per-sequence ALiBi slopes.
  all.push_back({"fp16_d64_group_empty_sequence_alibi_causal_bottom_right_3_splits",
                 [] {
                   KernelConfig c = split_config(DType::fp16, 64, MaskKind::causal, Mode::group);
                   c.bias = BiasKind::alibi;
                   return c;
                 }(),
                 3,
                 [=](TensorPool& pool) {
                   return testing::group_problem(pool, Family::fwd, fp16, {0, 40, 40, 170, 171},
                                                 {0, 300, 336, 700, 1100}, 4, 2, 64, 64)
                       .causal(MaskAlign::bottom_right)
                       .alibi(pool.uniform(DType::fp32, {4, 4}, 0.01, 0.3))
                       .build();
                 }});
  // A cache: per-sequence key lengths, one empty (all its splits and rows see nothing), with a
  // sink logit that the combine adds once (LSE = sink where nothing is visible).
  all.push_back({"bf16_d128_key_lengths_sink_logit_7_splits", split_config(bf16, 128), 7,
                 [=](TensorPool& pool) {
                   return batch(pool, bf16, {3, 4, 2, 16, 1000, 128, 128})
                       .key_lengths({1000, 129, 0})
                       .sink_logits(pool.uniform(DType::fp32, {4}, -1, 2))
                       .build();
                 }});
  // A window whose sink tokens (300) reach into the second and third splits (chunks of 128):
  // clipped sink blocks that start past block 0; soft cap on top.
  all.push_back({"fp16_d128_window_sink_tokens_softcap_7_splits",
                 [] {
                   KernelConfig c = split_config(DType::fp16, 128, MaskKind::window);
                   c.softcap = true;
                   return c;
                 }(),
                 7,
                 [=](TensorPool& pool) {
                   return batch(pool, fp16, {1, 2, 2, 64, 1000, 128, 128})
                       .window(100, 0, MaskAlign::bottom_right)
                       .sink_tokens(300)
                       .softcap(5.0)
                       .build();
                 }});
  // Decode-like rows over a top-left window (rows see keys i - 16 .. i + 4) and ALiBi, GQA; no
  // LSE output.
  all.push_back({"bf16_d64_window_top_left_alibi_gqa_3_splits_no_lse",
                 [] {
                   KernelConfig c = split_config(DType::bf16, 64, MaskKind::window);
                   c.bias = BiasKind::alibi;
                   return c;
                 }(),
                 3,
                 [=](TensorPool& pool) {
                   Problem p = batch(pool, bf16, {2, 6, 2, 300, 420, 64, 64})
                                   .window(16, 4)
                                   .alibi(pool.uniform(DType::fp32, {6}, 0.01, 0.2))
                                   .build();
                   p.return_lse = false;
                   p.lse = {};
                   return p;
                 }});
  all.push_back({"fp16_d128_softcap_alibi_sink_logit_3_splits",
                 [] {
                   KernelConfig c = split_config(DType::fp16, 128);
                   c.softcap = true;
                   c.bias = BiasKind::alibi;
                   return c;
                 }(),
                 3,
                 [=](TensorPool& pool) {
                   return batch(pool, fp16, {2, 4, 4, 65, 513, 128, 128})
                       .softcap(3.0)
                       .alibi(pool.uniform(DType::fp32, {4}, 0.01, 0.3))
                       .sink_logits(pool.uniform(DType::fp32, {4}, 0, 3))
                       .build();
                 }});
  return all;
}

// ---- combine-only problems -------------------------------------------------------------------

// A fwd_splitkv_combine problem over random partials (O in [-1, 1], LSE in [-3, 6]).
struct CombineCase {
  std::string name;
  std::function<Problem(TensorPool&)> make;
  int kernel_hdim_v = 0;  // 0: the problem's
};

// Row (b, h, i) of the partials sees nothing in `splits` (all of them when empty): LSE -inf and
// a garbage (NaN) partial that the combine must skip.
void mask_row(const Problem& p, int64_t b, int64_t h, int64_t i, std::vector<int64_t> splits = {}) {
  if (splits.empty())
    for (int64_t s = 0; s < p.split.num_splits; ++s) splits.push_back(s);
  const TensorView& o = p.split.o_acc;
  const TensorView& lse = p.split.lse_acc;
  for (int64_t s : splits) {
    numeric::store(lse.data, lse.dtype, lse.offset({s, b, h, i}), kNegInf);
    for (int64_t d = 0; d < p.hdim_v; ++d)
      numeric::store(o.data, o.dtype, o.offset({s, b, h, i, d}), kUnwritten);
  }
}

Problem random_combine(TensorPool& pool, DType dtype, Mode mode, int64_t batch, int64_t heads,
                       int64_t seq, int64_t hdim, int64_t num_splits, bool lse, bool sink,
                       DType o_acc_dtype = DType::fp32, bool gapped = false) {
  ProblemBuilder builder(Family::fwd_splitkv_combine);
  builder.dtype(dtype);
  if (mode == Mode::group) {
    // Three sequences of seq / 2, 0 and seq - seq / 2 tokens: batch 1, seq rows.
    builder.shape(1, heads, heads, 0, 0, hdim, hdim)
        .group({0, seq / 2, seq / 2, seq}, {0, 10, 20, 30});
    batch = 1;
  } else {
    builder.shape(batch, heads, heads, seq, seq, hdim, hdim);
  }
  builder.o(pool.filled(dtype, {batch, seq, heads, hdim}, kUnwritten));
  if (lse) builder.lse(pool.filled(DType::fp32, {batch, heads, seq}, kUnwritten));
  if (sink) builder.sink_logits(pool.uniform(DType::fp32, {heads}, -1, 4));
  Problem p = builder.peek();
  p.split = make_partials(pool, p, num_splits, gapped, o_acc_dtype);
  for (TensorView* view : {&p.split.o_acc, &p.split.lse_acc}) {
    const bool is_o = view == &p.split.o_acc;
    for_each_element(*view, [&](int64_t, int64_t offset) {
      const double value =
          std::uniform_real_distribution<double>(is_o ? -1.0 : -3.0, is_o ? 1.0 : 6.0)(pool.rng());
      numeric::store(view->data, view->dtype, offset, value);
    });
  }
  validate(p);
  return p;
}

std::vector<CombineCase> combine_cases() {
  std::vector<CombineCase> all;
  all.push_back({"bf16_d128_sink_logit_masked_rows_5_splits", [](TensorPool& pool) {
                   Problem p =
                       random_combine(pool, DType::bf16, Mode::batch, 2, 3, 37, 128, 5, true, true);
                   mask_row(p, 0, 1, 5);             // LSE = sink, O = 0
                   mask_row(p, 1, 2, 7, {0, 3, 4});  // only splits 1 and 2 count
                   return p;
                 }});
  // 200 splits: two passes of the 128-split staging, the running max rescaling the first.
  all.push_back({"fp16_d64_masked_rows_no_sink_200_splits", [](TensorPool& pool) {
                   Problem p = random_combine(pool, DType::fp16, Mode::batch, 1, 2, 40, 64, 200,
                                              true, false);
                   mask_row(p, 0, 0, 0);  // O = 0, LSE = -inf
                   std::vector<int64_t> first_pass;
                   for (int64_t s = 0; s < 128; ++s) first_pass.push_back(s);
                   mask_row(p, 0, 1, 39, first_pass);  // everything in the second pass
                   return p;
                 }});
  // fp32 output over group rows; no LSE output.
  all.push_back({"fp32_d256_group_3_splits_no_lse", [](TensorPool& pool) {
                   Problem p = random_combine(pool, DType::fp32, Mode::group, 1, 2, 45, 256, 3,
                                              false, false);
                   mask_row(p, 0, 1, 44);
                   return p;
                 }});
  // merge_states: 16-bit partials (finished attention outputs) merged into bf16.
  all.push_back({"bf16_d96_bf16_partials_sink_4_splits", [](TensorPool& pool) {
                   return random_combine(pool, DType::bf16, Mode::batch, 2, 2, 33, 96, 4, true,
                                         true, DType::bf16);
                 }});
  // A head dim that is no multiple of 4 on a wider kernel, gapped partials whose strides are
  // no multiples of 4 elements: the element-by-element path.
  all.push_back({"fp16_d90_on_d96_kernel_scalar_path_3_splits",
                 [](TensorPool& pool) {
                   Problem p = random_combine(pool, DType::fp16, Mode::batch, 1, 3, 21, 90, 3, true,
                                              false, DType::fp32, true);
                   mask_row(p, 0, 2, 20, {1});
                   return p;
                 },
                 96});
  return all;
}

// ---- device partials -------------------------------------------------------------------------

// Device copies of split partials (DeviceMirror copies only a problem's own tensors): poisoned
// for a kernel to write, or uploaded for one to read.
class DevicePartials {
 public:
  DevicePartials(const SplitKv& host, bool upload) : device_(host) {
    o_ = copy(host.o_acc, upload, device_.o_acc);
    lse_ = copy(host.lse_acc, upload, device_.lse_acc);
  }

  const SplitKv& split() const { return device_; }
  runtime::DeviceMirror::HostBytes download_o() const { return download(*o_, device_.o_acc); }
  runtime::DeviceMirror::HostBytes download_lse() const { return download(*lse_, device_.lse_acc); }

 private:
  static std::unique_ptr<jit::DeviceBuffer> copy(const TensorView& host, bool upload,
                                                 TensorView& device) {
    const int64_t bytes = host.extent() * dtype_size(host.dtype);
    auto buffer = std::make_unique<jit::DeviceBuffer>(bytes);
    if (upload) {
      buffer->copy_from_host(std::span(static_cast<const std::byte*>(host.data), bytes));
    } else {
      buffer->fill_bytes(runtime::kPoisonByte);
    }
    device.data = reinterpret_cast<void*>(buffer->address());
    device.space = MemorySpace::device;
    return buffer;
  }

  static runtime::DeviceMirror::HostBytes download(const jit::DeviceBuffer& buffer,
                                                   const TensorView& device) {
    runtime::DeviceMirror::HostBytes host{
        std::vector<std::byte>(static_cast<size_t>(buffer.bytes())), device};
    buffer.copy_to_host(host.bytes);
    host.view.data = host.bytes.data();
    host.view.space = MemorySpace::host;
    return host;
  }

  SplitKv device_;
  std::unique_ptr<jit::DeviceBuffer> o_, lse_;
};

// A device problem whose own partials are `split` (DeviceMirror leaves them on the host).
Problem with_split(Problem device, const SplitKv& split) {
  device.split = split;
  return device;
}

// A problem's views marked as device memory (nothing dereferenced): for the host-side checks.
Problem marked_device(Problem p) {
  for (TensorView* view : {&p.q, &p.k, &p.v, &p.o, &p.lse, &p.bias, &p.alibi_slopes, &p.sink_logits,
                           &p.split.o_acc, &p.split.lse_acc})
    view->space = MemorySpace::device;
  return p;
}

runtime::FwdDeviceIndices fake_indices(const Problem& p, const int64_t* fake) {
  runtime::FwdDeviceIndices indices;
  if (!p.seqstart_q.empty()) indices.seqstart_q = indices.seqstart_k = fake;
  if (!p.seqlen_k_per_batch.empty()) indices.seqlen_k_per_batch = fake;
  return indices;
}

// ---- host-side half ------------------------------------------------------------------------

TEST(SplitKvSm80Cases, ProblemsParamsAndLaunchShapesAreValid) {
  int n = 0;
  for (const Case& test : cases()) {
    SCOPED_TRACE(test.name);
    TensorPool pool(2000 + n++);
    const SplitProblems problems =
        split_problems(pool, test.make(pool), test.num_splits, test.gapped);
    EXPECT_NO_THROW(codegen::check_supported_sm80(test.split));
    const int64_t fake = 0;
    const Problem forward = marked_device(problems.forward);
    const Problem partials = marked_device(problems.partials);
    const fmha::FwdParams params = runtime::make_fwd_params(forward, fake_indices(forward, &fake),
                                                            Pipeline::sm80_mma, &partials.split);
    EXPECT_EQ(params.num_splits, test.num_splits);
    EXPECT_EQ(params.o, nullptr);
    EXPECT_EQ(params.sink_logits, nullptr);
    // The fwd_splitkv problem binds its own partials alike.
    EXPECT_EQ(runtime::make_fwd_params(partials, fake_indices(partials, &fake)).o_acc,
              params.o_acc);
    const jit::LaunchShape shape = codegen::launch_shape_sm80(test.split, forward, test.num_splits);
    EXPECT_EQ(shape.grid[2], static_cast<unsigned>(forward.batch * test.num_splits));

    const KernelConfig combine = combine_for(problems.forward);
    EXPECT_NO_THROW(codegen::check_supported_combine(combine));
    const fmha::CombineParams end_to_end = runtime::make_combine_params(forward, partials.split);
    EXPECT_EQ(end_to_end.num_splits, test.num_splits);
    EXPECT_EQ(end_to_end.lse != nullptr, forward.return_lse);
    EXPECT_EQ(end_to_end.sink_logits != nullptr, !forward.sink_logits.empty());
    const Problem combined = marked_device(problems.combine);
    EXPECT_NO_THROW(runtime::make_combine_params(combined, combined.split));
    // The grid covers the call's rows; in group mode those of every packing of the plan's key
    // (batch x the longest sequence), since the plan is reused for them.
    const int64_t rows = rows_batch(forward) * forward.nhead_q * rows_seq(forward);
    const int64_t covered =
        forward.mode == Mode::group ? forward.batch * forward.seqlen_q * forward.nhead_q : rows;
    const unsigned grid = codegen::launch_shape_combine(combine, forward).grid[0];
    EXPECT_EQ(grid, static_cast<unsigned>((covered + 15) / 16));
    EXPECT_GE(int64_t{grid} * 16, rows);
  }
  for (const CombineCase& test : combine_cases()) {
    SCOPED_TRACE(test.name);
    TensorPool pool(3000 + n++);
    const Problem p = marked_device(test.make(pool));
    const fmha::CombineParams params = runtime::make_combine_params(p, p.split);
    EXPECT_EQ(params.num_splits, p.split.num_splits);
    EXPECT_NO_THROW(codegen::launch_shape_combine(combine_for(p, test.kernel_hdim_v), p));
  }
}

// ---- GPU half --------------------------------------------------------------------------------

std::string nvrtc_arch(int compute_capability) {
  return "sm_" + std::to_string(compute_capability) + (compute_capability == 90 ? "a" : "");
}

runtime::Tolerance forward_tolerance(DType dtype) {
  // As the fwd GPU test: P is rounded to the input dtype before P V.
  return dtype == DType::fp16 ? runtime::Tolerance{2e-3, 1e-2} : runtime::Tolerance{1e-2, 2e-2};
}

class SplitKvSm80Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = gpu_skip_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    context_ = std::make_unique<jit::GpuContext>(0);
    std::printf("device: %s (sm_%d)\n", context_->device_name().c_str(),
                context_->compute_capability());
  }

  // Compiles every distinct config once (in parallel) and loads the modules.
  void build(const std::vector<KernelConfig>& configs) {
    std::vector<jit::BuildJob> jobs;
    for (const KernelConfig& c : configs) {
      const std::string generated = c.pipeline == Pipeline::combine
                                        ? codegen::generate_combine_source(c)
                                        : codegen::generate_sm80_source(c);
      if (modules_.count(c.symbol()) == 0 &&
          std::none_of(jobs.begin(), jobs.end(),
                       [&](const jit::BuildJob& job) { return job.name == c.symbol(); }))
        jobs.push_back({c.symbol(), generated});
    }
    jit::BuildOptions options;
    options.compile.arch = nvrtc_arch(context_->compute_capability());
    options.show_progress = false;
    jit::BuildReport report = jit::build_kernels(jobs, options, nullptr);
    ASSERT_TRUE(report.failure_report().empty()) << report.failure_report();
    for (jit::BuildResult& result : report.results)
      modules_.emplace(result.name, std::make_unique<jit::LoadedModule>(result.cubin));
  }

  template <class Params>
  void launch(const KernelConfig& config, const jit::LaunchShape& shape, const Params& params) {
    Params argument = params;
    void* arguments[] = {&argument};
    jit::launch_kernel(modules_.at(config.symbol())->function(config.symbol()), shape, arguments);
    context_->synchronize();
  }

  std::unique_ptr<jit::GpuContext> context_;
  std::map<std::string, std::unique_ptr<jit::LoadedModule>> modules_;
  // Own the host tensors of the problems a test builds up front.
  std::vector<std::unique_ptr<TensorPool>> pools_;
};

void expect_agrees(const char* what, const TensorView& expected, const TensorView& actual,
                   runtime::Tolerance tolerance) {
  const runtime::Agreement agreement = compare(expected, actual, tolerance.atol, tolerance.rtol);
  EXPECT_EQ(agreement.mismatches, 0) << "of " << agreement.compared << " " << what << " elements";
  std::printf("  %-28s max abs error %.3g over %lld elements\n", what, agreement.max_abs_error,
              static_cast<long long>(agreement.compared));
}

TEST_F(SplitKvSm80Gpu, PartialsCombineAndEndToEndMatchReference) {
  const std::vector<Case> all = cases();
  std::vector<SplitProblems> problems;
  std::vector<KernelConfig> configs;
  for (size_t n = 0; n < all.size(); ++n) {
    pools_.push_back(std::make_unique<TensorPool>(2000 + n));
    problems.push_back(split_problems(*pools_.back(), all[n].make(*pools_.back()),
                                      all[n].num_splits, all[n].gapped));
    configs.push_back(all[n].split);
    configs.push_back(combine_for(problems.back().forward));
  }
  build(configs);
  if (HasFatalFailure()) return;

  for (size_t n = 0; n < all.size(); ++n) {
    const Case& test = all[n];
    SplitProblems& host = problems[n];
    SCOPED_TRACE(test.name);
    std::printf("%s\n", test.name.c_str());
    reference::forward_splitkv(host.partials);
    reference::splitkv_combine(host.combine);
    reference::forward(host.forward);
    const KernelConfig combine = combine_for(host.forward);
    const runtime::Tolerance partial_tolerance = forward_tolerance(host.forward.dtype);

    // Split kernel: the partials of a fwd problem (its plan's two-stage form).
    const DeviceProblem device(host.forward);
    const DevicePartials written(host.partials.split, /*upload=*/false);
    launch(test.split, codegen::launch_shape_sm80(test.split, device.problem(), test.num_splits),
           runtime::make_fwd_params(device.problem(), device.indices(), Pipeline::sm80_mma,
                                    &written.split()));
    const auto o_acc = written.download_o();
    const auto lse_acc = written.download_lse();
    expect_agrees("partial O", host.partials.split.o_acc, o_acc.view, partial_tolerance);
    expect_agrees("partial LSE", host.partials.split.lse_acc, lse_acc.view, runtime::kLseTolerance);
    if (test.gapped) {
      EXPECT_EQ(testing::clobbered_padding(o_acc), 0) << "bytes written outside o_acc";
      EXPECT_EQ(testing::clobbered_padding(lse_acc), 0) << "bytes written outside lse_acc";
    }

    // End to end: the combine over the kernel's partials gives the forward's O and LSE.
    launch(combine, codegen::launch_shape_combine(combine, device.problem()),
           runtime::make_combine_params(device.problem(), written.split()));
    expect_agrees("end-to-end O", host.forward.o, device.download(device.problem().o).view,
                  partial_tolerance);
    if (host.forward.return_lse)
      expect_agrees("end-to-end LSE", host.forward.lse, device.download(device.problem().lse).view,
                    runtime::kLseTolerance);

    // The combine alone, fed the reference's partials.
    const DeviceProblem combined(host.combine);
    const DevicePartials uploaded(host.partials.split, /*upload=*/true);
    launch(combine, codegen::launch_shape_combine(combine, combined.problem()),
           runtime::make_combine_params(with_split(combined.problem(), uploaded.split()),
                                        uploaded.split()));
    expect_agrees("combine O", host.combine.o, combined.download(combined.problem().o).view,
                  runtime::output_tolerance(host.combine.out_dtype));
    if (host.combine.return_lse)
      expect_agrees("combine LSE", host.combine.lse, combined.download(combined.problem().lse).view,
                    runtime::kLseTolerance);
  }
}

TEST_F(SplitKvSm80Gpu, CombineOfRandomPartialsMatchesReference) {
  const std::vector<CombineCase> all = combine_cases();
  std::vector<Problem> problems;
  std::vector<KernelConfig> configs;
  for (size_t n = 0; n < all.size(); ++n) {
    pools_.push_back(std::make_unique<TensorPool>(3000 + n));
    problems.push_back(all[n].make(*pools_.back()));
    configs.push_back(combine_for(problems.back(), all[n].kernel_hdim_v));
  }
  build(configs);
  if (HasFatalFailure()) return;

  for (size_t n = 0; n < all.size(); ++n) {
    const Problem& host = problems[n];
    SCOPED_TRACE(all[n].name);
    std::printf("%s\n", all[n].name.c_str());
    const KernelConfig combine = combine_for(host, all[n].kernel_hdim_v);
    const DeviceProblem device(host);
    const DevicePartials uploaded(host.split, /*upload=*/true);
    launch(combine, codegen::launch_shape_combine(combine, device.problem()),
           runtime::make_combine_params(with_split(device.problem(), uploaded.split()),
                                        uploaded.split()));
    reference::splitkv_combine(host);
    expect_agrees("combine O", host.o, device.download(device.problem().o).view,
                  runtime::output_tolerance(host.out_dtype));
    if (host.return_lse)
      expect_agrees("combine LSE", host.lse, device.download(device.problem().lse).view,
                    runtime::kLseTolerance);
  }
}

}  // namespace
}  // namespace tilefmha
