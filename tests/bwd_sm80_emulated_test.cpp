// The three backward kernels' headers (kernels/fmha/bwd_dot_do_o.h, bwd_sm80.h,
// bwd_convert_dq.h) run on the host through the SIMT emulation (tests/support/emulation: fibers
// for threads, warp collectives for mma.sync, ldmatrix and shfl), with the parameters and launch
// shapes the GPU run uses (runtime::make_bwd_params, codegen::launch_shape_bwd_*). dQ, dK, dV
// (and dSink) are compared with reference::backward: this checks the kernels' fragment layouts,
// masks, GQA loop, varlen bounds, padding, deterministic slices and the dSink partials' head
// walk and reduction without a GPU. The emulation is
// exact about data movement but not about the tensor cores' summation order or the SFU's
// approximations, so the GPU tests (bwd_sm80_gpu_test) remain the final word.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

// The emulation's shims replace kernels/tile/ (this target puts tests/support/emulation first).
#include "simt_emulator.hpp"
// clang-format off
#include "fmha/bwd_convert_dq.h"
#include "fmha/bwd_dot_do_o.h"
#include "fmha/bwd_sm80.h"
// clang-format on

#include "codegen/bwd.hpp"
#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "runtime/bwd_params.hpp"
#include "runtime/tolerance.hpp"
#include "support/backward_views.hpp"
#include "support/forward_problems.hpp"
#include "support/gpu_problem.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::fmha {
alignas(128) unsigned char shared[emulation::kSharedBytes];
}

namespace tilefmha {
namespace {

using testing::broadcast_bias;
using testing::dbias_like;
using testing::kUnwritten;
using testing::like;
using testing::TensorPool;

// A host view marked as device memory: the emulated kernels read host memory directly.
TensorView as_device(TensorView view) {
  if (!view.empty()) view.space = MemorySpace::device;
  return view;
}

// The reference's gradients of a forward problem's outputs for a random dO, and the problem
// ready for the kernels (family bwd_dq_dk_dv, gradients poisoned).
struct Case {
  Problem expected;  // host views, gradients by reference::backward
  Problem kernels;   // the same inputs, fresh NaN gradients
};

// No dBias unless `dbias` names its dtype; no dSink unless `dsink` (the forward has sink logits).
Case make_case(TensorPool& pool, Problem forward, bool deterministic,
               std::optional<DType> dbias = std::nullopt, bool dsink = false) {
  reference::forward(forward);
  Problem p = forward;
  p.family = Family::bwd_dq_dk_dv;
  p.bwd.deterministic = deterministic;
  const auto& o = forward.o.shape;
  p.bwd.d_o = pool.uniform(forward.out_dtype, {o[0], o[1], o[2], o[3]}, -1, 1);
  Case c{p, p};
  for (Problem* target : {&c.expected, &c.kernels}) {
    target->bwd.dq = like(pool, forward.q);
    target->bwd.dk = like(pool, forward.k);
    target->bwd.dv = like(pool, forward.v);
    if (dbias) target->bwd.dbias = dbias_like(pool, forward.bias, *dbias);
    if (dsink) target->bwd.dsink = pool.filled(DType::fp32, {forward.nhead_q}, kUnwritten);
  }
  c.expected.bwd.d = pool.filled(
      DType::fp32, {forward.lse.shape[0], forward.lse.shape[1], forward.lse.shape[2]}, kUnwritten);
  c.expected.bwd.dq_acc = pool.filled(
      DType::fp32, {forward.q.shape[0], forward.q.shape[1], forward.q.shape[2], forward.q.shape[3]},
      kUnwritten);
  reference::backward(c.expected);
  return c;
}

// The three stages on the emulator, as the GPU plan runs them: D and the accumulator in
// scratch (one slice per key block in deterministic mode), indices from the host vectors.
template <class DotTraits, class GradTraits, class ConvertTraits>
void run_emulated(const Problem& host, const KernelConfig& grad_config) {
  Problem p = host;
  for (TensorView* view : {&p.q, &p.k, &p.v, &p.o, &p.lse, &p.sink_logits, &p.bias, &p.alibi_slopes,
                           &p.bwd.d_o, &p.bwd.dq, &p.bwd.dk, &p.bwd.dv, &p.bwd.dbias, &p.bwd.dsink})
    *view = as_device(*view);
  // What the launch does before a broadcast dBias is added to (templates/bwd_templates.cpp).
  ASSERT_EQ(runtime::dbias_refusal(p), "");
  if (const runtime::DbiasWrites writes = runtime::dbias_writes(p); writes.accumulate)
    std::memset(p.bwd.dbias.data, 0, static_cast<size_t>(writes.zero_bytes));
  runtime::FwdDeviceIndices indices;
  indices.seqstart_q = p.seqstart_q.empty() ? nullptr : p.seqstart_q.data();
  indices.seqstart_k = p.seqstart_k.empty() ? nullptr : p.seqstart_k.data();
  indices.seqlen_k_per_batch = p.seqlen_k_per_batch.empty() ? nullptr : p.seqlen_k_per_batch.data();

  const bool group = p.mode == Mode::group;
  const int64_t batch_rows = group ? 1 : p.batch, seq_rows = group ? p.total_q() : p.seqlen_q;
  const int64_t rows = batch_rows * seq_rows * p.nhead_q;
  const int64_t slices = p.bwd.deterministic ? codegen::bwd_key_blocks(grad_config, p) : 1;
  std::vector<float> d(static_cast<size_t>(std::max<int64_t>(rows, 1)), NAN);
  const int64_t slice_stride = (rows * p.hdim_q + 3) / 4 * 4;
  std::vector<float> acc(static_cast<size_t>(std::max<int64_t>(slices * slice_stride, 4)), NAN);
  runtime::BackwardScratch scratch;
  scratch.d = as_device(contiguous_view(d.data(), DType::fp32, {batch_rows, p.nhead_q, seq_rows}));
  scratch.dq_acc = as_device(
      contiguous_view(acc.data(), DType::fp32, {batch_rows, seq_rows, p.nhead_q, p.hdim_q}));
  scratch.dq_slices = slices;
  scratch.dq_slice_stride = slice_stride;

  KernelConfig rows_config = grad_config;
  rows_config.block_m = DotTraits::kBlockM;
  rows_config.warps = DotTraits::kWarps;
  rows_config.block_n = 0;
  rows_config.mask = MaskKind::none;
  rows_config.softcap = rows_config.deterministic = false;
  rows_config.bias = BiasKind::none;
  rows_config.dropout = rows_config.dbias = false;
  rows_config.family = Family::bwd_dot_do_o;
  rows_config.pipeline = Pipeline::bwd_dot_do_o;
  auto grid = [](const jit::LaunchShape& shape) {
    return emulation::Dim3{shape.grid[0], shape.grid[1], shape.grid[2]};
  };
  const jit::LaunchShape dot = codegen::launch_shape_bwd_rows(rows_config, p);
  // dSink: one partial per (dot CTA, query head), poisoned: every slot must be written.
  std::vector<float> partials(static_cast<size_t>(dot.grid[0] * p.nhead_q), NAN);
  if (!p.bwd.dsink.empty()) {
    scratch.dsink_partials = partials.data();
    scratch.dsink_partial_count = dot.grid[0];
  }
  const fmha::BwdParams params = runtime::make_bwd_params(p, indices, scratch);
  emulation::launch(grid(dot), dot.block[0], [&] { fmha::bwd_dot_do_o<DotTraits>(params); });
  const jit::LaunchShape grad = codegen::launch_shape_bwd_sm80(grad_config, p);
  ASSERT_EQ(grad.block[0], unsigned(GradTraits::kThreads));
  ASSERT_LE(grad.dynamic_shared_bytes, emulation::kSharedBytes);
  emulation::launch(grid(grad), grad.block[0], [&] { fmha::bwd_sm80<GradTraits>(params); });
  emulation::launch(grid(dot), dot.block[0], [&] { fmha::bwd_convert_dq<ConvertTraits>(params); });
}

// Tolerances of `computed` (the inputs' dtype), whatever dtype the gradient is stored in.
int64_t mismatches(const char* name, const TensorView& expected, const TensorView& actual,
                   DType computed) {
  double largest = 0;
  for_each_element(expected, [&](int64_t, int64_t offset) {
    largest = std::max(largest, std::fabs(numeric::load(expected.data, expected.dtype, offset)));
  });
  const runtime::Tolerance tolerance = runtime::gradient_tolerance(computed, largest);
  const runtime::Agreement agreement =
      testing::compare(expected, actual, tolerance.atol, tolerance.rtol);
  std::printf("    %s: max abs err %.3e (largest %.3e), %lld of %lld outside\n", name,
              agreement.max_abs_error, largest, static_cast<long long>(agreement.mismatches),
              static_cast<long long>(agreement.compared));
  return agreement.mismatches + (agreement.compared == expected.numel() ? 0 : 1);
}

void expect_gradients_match(const Case& c) {
  const DType dtype = c.expected.dtype;
  EXPECT_EQ(mismatches("dq", c.expected.bwd.dq, c.kernels.bwd.dq, dtype), 0);
  EXPECT_EQ(mismatches("dk", c.expected.bwd.dk, c.kernels.bwd.dk, dtype), 0);
  EXPECT_EQ(mismatches("dv", c.expected.bwd.dv, c.kernels.bwd.dv, dtype), 0);
  if (!c.expected.bwd.dbias.empty()) {
    EXPECT_EQ(mismatches("dbias", c.expected.bwd.dbias, c.kernels.bwd.dbias, dtype), 0);
  }
  // dSink sums fp32 terms of the same stored O, dO and LSE: the fp32 bound.
  if (!c.expected.bwd.dsink.empty()) {
    EXPECT_EQ(mismatches("dsink", c.expected.bwd.dsink, c.kernels.bwd.dsink, DType::fp32), 0);
  }
}

KernelConfig grad_config(DType dtype, int hdim, int block_m, int block_n, int warps, MaskKind mask,
                         Mode mode = Mode::batch, int hdim_v = 0) {
  KernelConfig c;
  c.family = Family::bwd_dq_dk_dv;
  c.pipeline = Pipeline::sm80_mma;
  c.arch = Arch::sm80;
  c.dtype = c.out_dtype = dtype;
  c.mode = mode;
  c.hdim_q = hdim;
  c.hdim_v = hdim_v > 0 ? hdim_v : hdim;
  c.block_m = block_m;
  c.block_n = block_n;
  c.block_k = 64;
  c.warps = warps;
  c.stages = 1;
  c.pad_seqlen_q = c.pad_seqlen_k = true;
  c.mask = mask;
  return c;
}

using tile::bfloat16_t;
using tile::half_t;

template <class T>
using Dot = fmha::DotDoOTraits<T, 64, 4>;
template <class T>
using Convert = fmha::ConvertDqTraits<T, 64, 4>;

// bf16, hdim 64 on the enumerated 128 x 128 tile of 8 warps; no mask; GQA 2:1; ragged 77 x 130.
TEST(BwdSm80Emulated, Bf16Hdim64NoMaskGqaRagged) {
  TensorPool pool(1);
  Case c = make_case(
      pool,
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 2, 1, 77, 130, 64, 64}).build(),
      false);
  using Grad = fmha::BwdTraits<bfloat16_t, 64, 64, 128, 128, 8, false, false, false, fmha::NoMask,
                               false, false>;
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(
      c.kernels, grad_config(DType::bf16, 64, 128, 128, 8, MaskKind::none));
  expect_gradients_match(c);
}

// fp16, hdim 128 on the 64 x 128 tile of 8 warps; bottom-right causal; GQA 4:1.
TEST(BwdSm80Emulated, Fp16Hdim128CausalBottomRightGqa) {
  TensorPool pool(2);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {1, 4, 1, 77, 130, 128, 128})
                    .causal(MaskAlign::bottom_right)
                    .build(),
                false);
  using Grad = fmha::BwdTraits<half_t, 128, 128, 64, 128, 8, false, false, false, fmha::WindowMask,
                               false, false>;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(
      c.kernels, grad_config(DType::fp16, 128, 64, 128, 8, MaskKind::causal));
  expect_gradients_match(c);
}

// The sm86/sm89 tile (64 keys on 4 warps), top-left causal over more keys than queries.
TEST(BwdSm80Emulated, Bf16Hdim128FourWarpsCausalTopLeft) {
  TensorPool pool(3);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 2, 2, 70, 100, 128, 128})
                    .causal()
                    .build(),
                false);
  using Grad = fmha::BwdTraits<bfloat16_t, 128, 128, 64, 64, 4, false, false, false,
                               fmha::WindowMask, false, false>;
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(
      c.kernels, grad_config(DType::bf16, 128, 64, 64, 4, MaskKind::causal));
  expect_gradients_match(c);
}

// Varlen with an empty sequence, a window with sink tokens, a soft cap and a padded head dim
// (72 in 96-wide tiles).
TEST(BwdSm80Emulated, Fp16VarlenWindowSinksSoftcapPaddedHeadDim) {
  TensorPool pool(4);
  Case c = make_case(pool,
                     testing::group_problem(pool, Family::fwd, DType::fp16, {0, 30, 30, 100},
                                            {0, 20, 45, 170}, 2, 1, 72, 72)
                         .window(24, 3, MaskAlign::bottom_right)
                         .sink_tokens(5)
                         .softcap(4.0)
                         .build(),
                     false);
  using Grad =
      fmha::BwdTraits<half_t, 72, 72, 64, 64, 4, true, true, true, fmha::WindowMask, true, false>;
  KernelConfig config = grad_config(DType::fp16, 72, 64, 64, 4, MaskKind::window, Mode::group);
  config.softcap = config.pad_hdim_q = config.pad_hdim_v = true;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// More queries than keys under a bottom-right causal mask: the first rows see no key (LSE =
// -inf, no gradient). Sink logits join the forward's LSE, which is all the backward needs of
// them. Head dim 32 on the 128 x 128 tile of 8 warps.
TEST(BwdSm80Emulated, Fp16Hdim32FullyMaskedRowsAndSinkLogits) {
  TensorPool pool(7);
  const TensorView sinks = pool.uniform(DType::fp32, {2}, -1, 1);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {1, 2, 1, 150, 77, 32, 32})
                    .causal(MaskAlign::bottom_right)
                    .sink_logits(sinks)
                    .build(),
                false);
  using Grad = fmha::BwdTraits<half_t, 32, 32, 128, 128, 8, false, false, false, fmha::WindowMask,
                               false, false>;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(
      c.kernels, grad_config(DType::fp16, 32, 128, 128, 8, MaskKind::causal));
  expect_gradients_match(c);
}

// dSink (bwd.dsink): bwd_dot_do_o's per-(CTA, head) partials, reduced by bwd_convert_dq, against
// the reference. Sinks in [1, 4] take a large share of each row, so dSink is far from 0.
TensorView large_sinks(TensorPool& pool, int64_t heads) {
  return pool.uniform(DType::fp32, {heads}, 1, 4);
}

// GQA 4:1 under bottom-right causal with more queries than keys: the first rows see only the
// sink (O = 0, so they add 0). Eight heads: each 64-row dot CTA holds eight tokens of every head.
TEST(BwdSm80Emulated, DsinkBatchGqaRowsOnlyTheSinkSees) {
  TensorPool pool(31);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 8, 2, 150, 77, 64, 64})
                    .causal(MaskAlign::bottom_right)
                    .sink_logits(large_sinks(pool, 8))
                    .build(),
                false, std::nullopt, true);
  using Grad = fmha::BwdTraits<half_t, 64, 64, 64, 64, 4, false, false, false, fmha::WindowMask,
                               false, false>;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(
      c.kernels, grad_config(DType::fp16, 64, 64, 64, 4, MaskKind::causal));
  expect_gradients_match(c);
}

// Varlen with an empty sequence and one without keys; six heads, so the dot CTAs' 64 rows start
// at every head offset; three-warp row kernels (a 96-thread reduction tree, not a power of 2).
TEST(BwdSm80Emulated, DsinkVarlenSixHeadsThreeWarps) {
  TensorPool pool(32);
  Case c = make_case(pool,
                     testing::group_problem(pool, Family::fwd, DType::bf16, {0, 30, 30, 100, 101},
                                            {0, 20, 45, 170, 170}, 6, 2, 64, 64)
                         .causal(MaskAlign::bottom_right)
                         .sink_logits(large_sinks(pool, 6))
                         .build(),
                     false, std::nullopt, true);
  using Grad = fmha::BwdTraits<bfloat16_t, 64, 64, 64, 64, 4, true, false, false, fmha::WindowMask,
                               false, false>;
  run_emulated<fmha::DotDoOTraits<bfloat16_t, 64, 3>, Grad,
               fmha::ConvertDqTraits<bfloat16_t, 64, 3>>(
      c.kernels, grad_config(DType::bf16, 64, 64, 64, 4, MaskKind::causal, Mode::group));
  expect_gradients_match(c);
}

// 96 heads over 5 queries: more heads than a dot CTA has rows (each holds 64 of them and writes
// zeros for the rest) and than the convert grid has CTAs (each reduces several heads).
TEST(BwdSm80Emulated, DsinkMoreHeadsThanRowsAndCtas) {
  TensorPool pool(33);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {1, 96, 8, 5, 20, 32, 32})
                    .sink_logits(large_sinks(pool, 96))
                    .build(),
                true, std::nullopt, true);
  using Grad =
      fmha::BwdTraits<half_t, 32, 32, 64, 64, 4, false, false, false, fmha::NoMask, false, true>;
  KernelConfig config = grad_config(DType::fp16, 32, 64, 64, 4, MaskKind::none);
  config.deterministic = true;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// Per-sequence key counts in batch mode: dK and dV rows past a sequence's keys are zero, and a
// key block past them all (sequence 1 here) still writes its zeros.
TEST(BwdSm80Emulated, BatchModeKeyLengths) {
  TensorPool pool(6);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 2, 2, 50, 150, 64, 64})
                    .key_lengths({150, 40})
                    .causal(MaskAlign::bottom_right)
                    .build(),
                false);
  using Grad = fmha::BwdTraits<half_t, 64, 64, 64, 64, 4, false, false, false, fmha::WindowMask,
                               false, false>;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(
      c.kernels, grad_config(DType::fp16, 64, 64, 64, 4, MaskKind::causal));
  expect_gradients_match(c);
}

// Deterministic mode: one dQ slice per key block, summed in order by the convert kernel.
TEST(BwdSm80Emulated, DeterministicSlices) {
  TensorPool pool(5);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 2, 1, 40, 200, 64, 64})
                    .causal(MaskAlign::bottom_right)
                    .build(),
                true);
  using Grad = fmha::BwdTraits<bfloat16_t, 64, 64, 64, 64, 4, false, false, false, fmha::WindowMask,
                               false, true>;
  KernelConfig config = grad_config(DType::bf16, 64, 64, 64, 4, MaskKind::causal);
  config.deterministic = true;
  run_emulated<Dot<bfloat16_t>, Grad, fmha::ConvertDqTraits<bfloat16_t, 64, 4>>(c.kernels, config);
  expect_gradients_match(c);
}

// Head dim 256: two column parts, so 8 warps for 64 keys (sm80/sm90 tile); GQA 2:1, bottom-right
// causal over ragged lengths. A part that wrote the wrong columns, or only one part, fails.
TEST(BwdSm80Emulated, Bf16Hdim256ColumnSplitCausalGqa) {
  TensorPool pool(11);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 4, 2, 70, 90, 256, 256})
                    .causal(MaskAlign::bottom_right)
                    .build(),
                false);
  using Grad = fmha::BwdTraits<bfloat16_t, 256, 256, 64, 64, 8, false, false, false,
                               fmha::WindowMask, false, false>;
  static_assert(Grad::kParts == 2 && Grad::kPartQ == 128 && Grad::kPartV == 128);
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(
      c.kernels, grad_config(DType::bf16, 256, 64, 64, 8, MaskKind::causal));
  expect_gradients_match(c);
}

// (hdim_q, hdim_v) = (192, 128): parts of 96 dK and 64 dV columns; varlen with an empty
// sequence, deterministic dQ slices.
TEST(BwdSm80Emulated, Fp16Hdim192x128VarlenDeterministic) {
  TensorPool pool(12);
  Case c = make_case(pool,
                     testing::group_problem(pool, Family::fwd, DType::fp16, {0, 50, 50, 110},
                                            {0, 70, 90, 180}, 2, 1, 192, 128)
                         .causal()
                         .build(),
                     true);
  using Grad = fmha::BwdTraits<half_t, 192, 128, 64, 64, 8, true, false, false, fmha::WindowMask,
                               false, true>;
  static_assert(Grad::kPartQ == 96 && Grad::kPartV == 64);
  KernelConfig config =
      grad_config(DType::fp16, 192, 64, 64, 8, MaskKind::causal, Mode::group, 128);
  config.deterministic = true;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// Head dim 160 (parts of 80 columns: the second starts mid-panel) on the sm86 tile, a window
// with a soft cap; and 256 on the sm86/sm89 tile of 32 keys and 4 warps.
TEST(BwdSm80Emulated, Fp16Hdim160WindowSoftcap) {
  TensorPool pool(13);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 2, 2, 60, 75, 160, 160})
                    .window(20, 10)
                    .softcap(3.0)
                    .build(),
                false);
  using Grad = fmha::BwdTraits<half_t, 160, 160, 64, 64, 8, false, false, false, fmha::WindowMask,
                               true, false>;
  KernelConfig config = grad_config(DType::fp16, 160, 64, 64, 8, MaskKind::window);
  config.softcap = true;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

TEST(BwdSm80Emulated, Bf16Hdim256NarrowTileNoMask) {
  TensorPool pool(14);
  Case c = make_case(
      pool,
      testing::batch_problem(pool, Family::fwd, DType::bf16, {1, 2, 1, 45, 70, 256, 256}).build(),
      false);
  using Grad = fmha::BwdTraits<bfloat16_t, 256, 256, 32, 32, 4, false, false, false, fmha::NoMask,
                               false, false>;
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(
      c.kernels, grad_config(DType::bf16, 256, 32, 32, 4, MaskKind::none));
  expect_gradients_match(c);
}

using fmha::AlibiBias;
using fmha::BwdDBias;
using fmha::BwdElementwiseBias;
using fmha::BwdNoDropout;
using fmha::BwdPhiloxDropout;
using fmha::NoBias;
using fmha::NoMask;
using fmha::WindowMask;

// ALiBi with one slope per head: GQA 4:1, bottom-right causal, ragged lengths. Slopes up to 0.5
// over distances up to 100 dominate the logits: a kernel without ALiBi misses by far.
TEST(BwdSm80Emulated, Fp16AlibiPerHeadGqaCausal) {
  TensorPool pool(21);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 4, 1, 70, 100, 64, 64})
                    .causal(MaskAlign::bottom_right)
                    .alibi(pool.uniform(DType::fp32, {4}, 0.05, 0.5))
                    .build(),
                false);
  using Grad = fmha::BwdTraits<half_t, 64, 64, 64, 64, 4, false, false, false, WindowMask, false,
                               false, AlibiBias>;
  KernelConfig config = grad_config(DType::fp16, 64, 64, 64, 4, MaskKind::causal);
  config.bias = BiasKind::alibi;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// ALiBi with a slope per (sequence, head) in group mode (the shift len_k - len_q is per
// sequence), an empty sequence, head dim 256 (column split) and deterministic dQ.
TEST(BwdSm80Emulated, Bf16AlibiPerSequenceVarlenHdim256Deterministic) {
  TensorPool pool(22);
  Case c = make_case(pool,
                     testing::group_problem(pool, Family::fwd, DType::bf16, {0, 40, 40, 100},
                                            {0, 60, 90, 150}, 2, 2, 256, 256)
                         .alibi(pool.uniform(DType::fp32, {3, 2}, 0.05, 0.3))
                         .build(),
                     true);
  using Grad = fmha::BwdTraits<bfloat16_t, 256, 256, 64, 64, 8, true, false, false, NoMask, false,
                               true, AlibiBias>;
  KernelConfig config = grad_config(DType::bf16, 256, 64, 64, 8, MaskKind::none, Mode::group);
  config.bias = BiasKind::alibi;
  config.deterministic = true;
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// An fp32 bias of its own per (sequence, head): dBias (fp32) is stored once per element, zeros
// where the causal mask hides the pair. GQA 2:1.
TEST(BwdSm80Emulated, Fp16BiasWithDbiasCausalGqa) {
  TensorPool pool(23);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 4, 2, 50, 90, 64, 64})
                    .causal()
                    .bias(pool.uniform(DType::fp32, {2, 4, 50, 90}, -2, 2))
                    .build(),
                false, DType::fp32);
  using Grad = fmha::BwdTraits<half_t, 64, 64, 64, 64, 4, false, false, false, WindowMask, false,
                               false, BwdElementwiseBias, BwdNoDropout, BwdDBias>;
  KernelConfig config = grad_config(DType::fp16, 64, 64, 64, 4, MaskKind::causal);
  config.bias = BiasKind::elementwise;
  config.dbias = true;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// A bf16 bias shared by every sequence and head: its fp32 dBias sums over both with atomics.
TEST(BwdSm80Emulated, Bf16BroadcastBiasDbiasSumsOverBatchAndHeads) {
  TensorPool pool(24);
  const TensorView bias = broadcast_bias(pool, DType::bf16, {1, 1, 45, 70}, {2, 2, 45, 70});
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 2, 1, 45, 70, 128, 128})
                    .bias(bias)
                    .build(),
                false, DType::fp32);
  using Grad = fmha::BwdTraits<bfloat16_t, 128, 128, 64, 64, 4, false, false, false, NoMask, false,
                               false, BwdElementwiseBias, BwdNoDropout, BwdDBias>;
  KernelConfig config = grad_config(DType::bf16, 128, 64, 64, 4, MaskKind::none);
  config.bias = BiasKind::elementwise;
  config.dbias = true;
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// Group mode: bias and dBias (bf16, stored) are [batch, head, longest q, longest k], so rows and
// keys past a sequence, the empty sequence's included, must come out 0; a window skips whole
// query blocks, whose zeros are written too. Deterministic.
TEST(BwdSm80Emulated, Fp16VarlenBiasDbiasWindowDeterministic) {
  TensorPool pool(25);
  Case c = make_case(pool,
                     testing::group_problem(pool, Family::fwd, DType::fp16, {0, 30, 30, 100},
                                            {0, 45, 60, 160}, 2, 1, 96, 96)
                         .window(20, 5)
                         .bias(pool.uniform(DType::bf16, {3, 2, 70, 100}, -2, 2))
                         .build(),
                     true, DType::bf16);
  using Grad = fmha::BwdTraits<half_t, 96, 96, 64, 64, 4, true, false, false, WindowMask, false,
                               true, BwdElementwiseBias, BwdNoDropout, BwdDBias>;
  KernelConfig config = grad_config(DType::fp16, 96, 64, 64, 4, MaskKind::window, Mode::group);
  config.bias = BiasKind::elementwise;
  config.dbias = config.deterministic = true;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// A key-padding style bias [batch, head, 1, keys] broadcast over queries, with the column split
// of (192, 128).
TEST(BwdSm80Emulated, Bf16QueryBroadcastBiasHdim192x128) {
  TensorPool pool(26);
  const TensorView bias = broadcast_bias(pool, DType::fp32, {2, 2, 1, 80}, {2, 2, 60, 80});
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::bf16, {2, 2, 2, 60, 80, 192, 128})
                    .bias(bias)
                    .causal(MaskAlign::bottom_right)
                    .build(),
                false, DType::fp32);
  using Grad = fmha::BwdTraits<bfloat16_t, 192, 128, 64, 64, 8, false, false, false, WindowMask,
                               false, false, BwdElementwiseBias, BwdNoDropout, BwdDBias>;
  KernelConfig config =
      grad_config(DType::bf16, 192, 64, 64, 8, MaskKind::causal, Mode::batch, 128);
  config.bias = BiasKind::elementwise;
  config.dbias = true;
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// Dropout replays the forward's Philox stream: GQA 2:1, bottom-right causal, a seed with both
// halves set and an offset.
TEST(BwdSm80Emulated, Fp16DropoutCausalGqa) {
  TensorPool pool(27);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {2, 4, 2, 70, 100, 64, 64})
                    .causal(MaskAlign::bottom_right)
                    .dropout(0.2, 0x1234567890ABCDEFull, 77)
                    .build(),
                false);
  using Grad = fmha::BwdTraits<half_t, 64, 64, 64, 64, 4, false, false, false, WindowMask, false,
                               false, NoBias, BwdPhiloxDropout>;
  KernelConfig config = grad_config(DType::fp16, 64, 64, 64, 4, MaskKind::causal);
  config.dropout = true;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// Dropout in group mode (sequence-local counters, an offset past 32 bits), head dim 256 and
// deterministic dQ.
TEST(BwdSm80Emulated, Bf16DropoutVarlenHdim256Deterministic) {
  TensorPool pool(28);
  Case c = make_case(pool,
                     testing::group_problem(pool, Family::fwd, DType::bf16, {0, 40, 40, 110},
                                            {0, 50, 80, 170}, 4, 2, 256, 256)
                         .causal(MaskAlign::bottom_right)
                         .dropout(0.3, 99, 1ull << 40)
                         .build(),
                     true);
  using Grad = fmha::BwdTraits<bfloat16_t, 256, 256, 64, 64, 8, true, false, false, WindowMask,
                               false, true, NoBias, BwdPhiloxDropout>;
  KernelConfig config = grad_config(DType::bf16, 256, 64, 64, 8, MaskKind::causal, Mode::group);
  config.dropout = config.deterministic = true;
  run_emulated<Dot<bfloat16_t>, Grad, Convert<bfloat16_t>>(c.kernels, config);
  expect_gradients_match(c);
}

// Everything at once: soft cap, an fp16 bias with fp16 dBias, and dropout (dBias is the
// gradient of the dropped-out softmax's logits).
TEST(BwdSm80Emulated, Fp16DropoutBiasDbiasSoftcap) {
  TensorPool pool(29);
  Case c =
      make_case(pool,
                testing::batch_problem(pool, Family::fwd, DType::fp16, {1, 2, 2, 64, 96, 128, 128})
                    .softcap(5.0)
                    .bias(pool.uniform(DType::fp16, {1, 2, 64, 96}, -2, 2))
                    .dropout(0.15, 5, 6)
                    .build(),
                false, DType::fp16);
  using Grad = fmha::BwdTraits<half_t, 128, 128, 64, 128, 8, false, false, false, NoMask, true,
                               false, BwdElementwiseBias, BwdPhiloxDropout, BwdDBias>;
  KernelConfig config = grad_config(DType::fp16, 128, 64, 128, 8, MaskKind::none);
  config.softcap = config.dropout = config.dbias = true;
  config.bias = BiasKind::elementwise;
  run_emulated<Dot<half_t>, Grad, Convert<half_t>>(c.kernels, config);
  expect_gradients_match(c);
}

}  // namespace
}  // namespace tilefmha
