// The split-KV combine kernel's own code (kernels/fmha/splitkv_combine.h), compiled for the host
// against the stand-ins of tests/emulation/ and run with one std::thread per CUDA thread, on the
// parameters runtime::make_combine_params builds and the grid codegen::launch_shape_combine
// sizes, against reference::splitkv_combine: fp32 partials (the split kernels') and 16-bit ones
// (merge_states), fp32, fp16 and bf16 outputs, head dims that take the vector and the scalar
// paths, one pass and several passes over the splits (the online rescale across passes), batches
// of loads in flight with a short last batch, the sink logit, the LSE output, splits that saw no
// key (LSE -inf, a NaN partial that must not leak), a row that saw none (O = 0; LSE -inf, or the
// sink's) and a last CTA with rows past the end. It checks the kernel's indexing and merge without a GPU; the
// GPU itself is the engine and split-KV GPU tests'.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "codegen/combine.hpp"
#include "core/numeric.hpp"
#include "emulated_launch.hpp"
#include "fmha/splitkv_combine.h"
#include "runtime/combine_params.hpp"
#include "runtime/tolerance.hpp"
#include "support/forward_problems.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/merge_states.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha {
namespace {

using testing::TensorPool;

constexpr int64_t kBatch = 2, kHeads = 3, kSeq = 5;

struct Case {
  std::string name;
  DType partial_dtype;
  DType out_dtype;
  int64_t hdim;  // the problem's; the kernel's HdimV may be wider
  int64_t splits;
  bool sink = false;
  bool lse = true;
  // Splits of row (0, 0, 0) and of every row's split 1 that saw no key: LSE -inf, partial NaN.
  bool empty_splits = true;
  // Row (1, 2, 4) saw no key in any split.
  bool empty_row = false;
};

struct States {
  TensorView o_states, lse_states, o, lse, sink;
};

States make_states(TensorPool& pool, const Case& c) {
  States s;
  s.o_states = pool.uniform(c.partial_dtype, {c.splits, kBatch, kHeads, kSeq, c.hdim}, -1, 1);
  s.lse_states = pool.uniform(DType::fp32, {c.splits, kBatch, kHeads, kSeq}, -4, 4);
  s.o = pool.filled(c.out_dtype, {kBatch, kSeq, kHeads, c.hdim}, testing::kUnwritten);
  if (c.lse) s.lse = pool.filled(DType::fp32, {kBatch, kHeads, kSeq}, testing::kUnwritten);
  if (c.sink) s.sink = pool.uniform(DType::fp32, {kHeads}, -1, 2);
  const double none = -std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto empty = [&](int64_t split, int64_t b, int64_t h, int64_t i) {
    numeric::store(s.lse_states, {split, b, h, i}, none);
    for (int64_t d = 0; d < c.hdim; ++d) numeric::store(s.o_states, {split, b, h, i, d}, nan);
  };
  if (c.empty_splits && c.splits > 1) {
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t h = 0; h < kHeads; ++h)
        for (int64_t i = 0; i < kSeq; ++i) empty(1, b, h, i);
    for (int64_t split = 0; split < c.splits; split += 3) empty(split, 0, 0, 0);
  }
  if (c.empty_row)
    for (int64_t split = 0; split < c.splits; ++split) empty(split, 1, 2, 4);
  return s;
}

// The problem's views flagged as device memory (they stay host memory, which the emulated
// threads read), as make_combine_params requires.
Problem as_device(Problem p) {
  for (TensorView* view : {&p.o, &p.lse, &p.sink_logits, &p.split.o_acc, &p.split.lse_acc})
    view->space = MemorySpace::device;
  return p;
}

// The combine tile the arch data enumerates for `hdim_v` (data/arch/sm90.json), with block_n
// splits a pass.
KernelConfig config_of(const Case& c, int hdim_v, int block_m, int block_n) {
  KernelConfig k;
  k.family = Family::fwd_splitkv_combine;
  k.pipeline = Pipeline::combine;
  k.arch = Arch::sm90;
  k.dtype = k.out_dtype = c.out_dtype;
  k.hdim_q = k.hdim_v = hdim_v;
  k.block_m = block_m;
  k.block_n = block_n;
  k.block_k = hdim_v;
  k.warps = 4;
  k.stages = 1;
  k.lse = c.lse;
  k.sink_logit = c.sink;
  k.pad_seqlen_q = k.pad_seqlen_k = k.pad_hdim_q = k.pad_hdim_v = true;
  return k;
}

template <class Output, int HdimV, int BlockM, int BlockN, bool StoreLse, bool Sink>
void check(const Case& c) {
  SCOPED_TRACE(c.name);
  ASSERT_EQ(StoreLse, c.lse);
  ASSERT_EQ(Sink, c.sink);
  TensorPool pool(77);
  const States states = make_states(pool, c);
  const States expected{states.o_states, states.lse_states,
                        pool.filled(c.out_dtype, {kBatch, kSeq, kHeads, c.hdim}, 0),
                        c.lse ? pool.filled(DType::fp32, {kBatch, kHeads, kSeq}, 0) : TensorView{},
                        states.sink};
  const Problem problem =
      merge_states_problem({states.o_states, states.lse_states, states.o, states.lse, states.sink});
  const Problem device = as_device(problem);
  const fmha::CombineParams params = runtime::make_combine_params(device, device.split);
  const KernelConfig config = config_of(c, HdimV, BlockM, BlockN);
  const jit::LaunchShape shape = codegen::launch_shape_combine(config, device);
  ASSERT_EQ(shape.grid[0], (kBatch * kHeads * kSeq + BlockM - 1) / BlockM);
  using Traits = fmha::CombineTraits<Output, HdimV, BlockM, BlockN, 4, StoreLse, Sink>;
  ASSERT_EQ(shape.block[0], unsigned(Traits::kThreads));
  emulation::run_grid(shape.grid[0], shape.block[0],
                      [&] { fmha::splitkv_combine<Traits>(params); });

  reference::splitkv_combine(merge_states_problem(
      {expected.o_states, expected.lse_states, expected.o, expected.lse, expected.sink}));
  runtime::Agreement o;
  o.add(states.o, expected.o, runtime::output_tolerance(c.out_dtype));
  EXPECT_EQ(o.compared, kBatch * kSeq * kHeads * c.hdim);
  EXPECT_EQ(o.mismatches, 0) << "O: max abs err " << o.max_abs_error;
  if (c.lse) {
    runtime::Agreement lse;
    lse.add(states.lse, expected.lse, runtime::kLseTolerance);
    EXPECT_EQ(lse.mismatches, 0) << "LSE: max abs err " << lse.max_abs_error;
  }
  if (c.empty_row) {
    for (int64_t d = 0; d < c.hdim; ++d) EXPECT_EQ(numeric::load(states.o, {1, 4, 2, d}), 0.0);
    // With a sink logit the row's LSE is the sink's; without, nothing was seen.
    if (c.lse && !c.sink) {
      EXPECT_EQ(numeric::load(states.lse, {1, 2, 4}), -std::numeric_limits<double>::infinity());
    }
  }
}

// The split kernels' fp32 partials at hdim 128 (a warp per row, one vector a lane, 16 splits'
// loads in flight): 37 splits are three batches, the last of 5, in one pass; 30 rows of 4 a CTA
// leave the last CTA half empty.
TEST(CombineEmulation, Fp32PartialsOnePassWithSinkAndLse) {
  check<float, 128, 4, 128, true, true>(
      {"fp32 partials, hdim 128, 37 splits, sink", DType::fp32, DType::fp32, 128, 37, true});
  check<tile::bfloat16_t, 128, 4, 128, true, false>(
      {"fp32 partials, bf16 O, 16 splits, a row with no key", DType::fp32, DType::bf16, 128, 16,
       false, true, true, true});
}

// Passes of 8 splits (block_n 8): the running max rescales the sum and the accumulators across
// 5 passes, the last one short; hdim 64 gives a row half a warp.
TEST(CombineEmulation, PassesRescaleAcrossSplits) {
  check<float, 64, 8, 8, false, false>(
      {"fp32, hdim 64, 37 splits in passes of 8", DType::fp32, DType::fp32, 64, 37, false, false});
  check<tile::half_t, 64, 8, 8, true, true>({"fp32 partials, fp16 O, 9 splits in passes of 8, sink",
                                             DType::fp32, DType::fp16, 64, 9, true});
}

// merge_states' 16-bit states (O in their dtype): bf16 at hdim 96 (three quarters of a warp's
// vectors), and fp16 at a head dim that is not a multiple of 4 (30, in the hdim-32 kernel), which
// loads and stores element by element.
TEST(CombineEmulation, SixteenBitStatesAndScalarRows) {
  check<tile::bfloat16_t, 96, 4, 128, true, false>(
      {"bf16 states, hdim 96, 6 splits", DType::bf16, DType::bf16, 96, 6});
  check<tile::half_t, 32, 16, 128, true, true>(
      {"fp16 states, hdim 30 (scalar), 5 splits, a row with no key", DType::fp16, DType::fp16, 30,
       5, true, true, true, true});
  check<float, 32, 16, 128, true, false>(
      {"one state", DType::fp32, DType::fp32, 30, 1, false, true, false});
}

}  // namespace
}  // namespace tilefmha
