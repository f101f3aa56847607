// The Hopper backward (bwd_dq_dk_dv on sm90_ws, between the portable row stages) through the
// public Engine restricted to sm90_ws: dQ, dK and dV against the CPU reference on fresh random
// inputs, gradients poisoned before each run. Cases: head dims 64 and 128, bf16 and fp16, ragged
// lengths (partial query and key blocks), causal top-left and bottom-right, a window with sink
// tokens, GQA, soft cap, varlen with an empty sequence, rows that see no key, several key blocks
// per head, and deterministic mode (bitwise-identical repeats, with the per-query-block turn
// counters under causal, window and varlen masks), and dSink (batch and varlen, GQA, rows only the
// sink sees, more heads than rows per row-kernel CTA, bitwise repeats in both modes). Skipped
// without a GPU, driver or NVRTC, or on a GPU other than sm_90.
#include <gtest/gtest.h>

#include <string>

#include "support/backward_gpu.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::BackwardCase;
using testing::make_case;
using testing::TensorPool;

using BwdSm90Gpu = testing::BackwardGpuTest<Pipeline::sm90_ws>;

ProblemBuilder batch(TensorPool& pool, DType dtype, testing::Dims d) {
  return testing::batch_backward(pool, dtype, d);
}

TEST_F(BwdSm90Gpu, Bf16Hdim64NoMaskSeveralKeyBlocks) {
  TensorPool pool(21);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 4, 4, 300, 520, 64, 64}).build());
}

TEST_F(BwdSm90Gpu, Fp16Hdim128CausalTopLeftRagged) {
  TensorPool pool(22);
  expect_matches_reference(pool,
                           batch(pool, DType::fp16, {2, 2, 2, 77, 130, 128, 128}).causal().build());
}

TEST_F(BwdSm90Gpu, Bf16Hdim128CausalBottomRightGqa) {
  TensorPool pool(23);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 8, 2, 333, 400, 128, 128})
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(BwdSm90Gpu, Fp16Hdim64WindowWithSinkTokensGqa) {
  TensorPool pool(24);
  expect_matches_reference(pool, batch(pool, DType::fp16, {1, 8, 2, 600, 700, 64, 64})
                                     .window(150, 8, MaskAlign::bottom_right)
                                     .sink_tokens(4)
                                     .build());
}

TEST_F(BwdSm90Gpu, Bf16Hdim128SoftCapAndScale) {
  TensorPool pool(25);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 2, 1, 196, 264, 128, 128}).softcap(5.0).scale(0.3).build());
}

TEST_F(BwdSm90Gpu, Fp16Hdim128VarlenWithEmptySequence) {
  TensorPool pool(26);
  // Query lengths 40, 0, 330, 1 over key lengths 35, 20, 400, 64; bottom-right causal, GQA 4:1.
  expect_matches_reference(
      pool, testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 370, 371},
                                   {0, 35, 55, 455, 519}, 8, 2, 128, 128)
                .causal(MaskAlign::bottom_right)
                .build());
}

// More queries than keys under bottom-right causal: the first rows see no key (no gradient).
TEST_F(BwdSm90Gpu, Bf16Hdim64FullyMaskedRowsAndSinkLogits) {
  TensorPool pool(27);
  const TensorView sinks = pool.uniform(DType::fp32, {4}, -1, 1);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 4, 2, 350, 77, 64, 64})
                                     .causal(MaskAlign::bottom_right)
                                     .sink_logits(sinks)
                                     .build());
}

TEST_F(BwdSm90Gpu, DeterministicCausalGqaRepeatsAreBitIdentical) {
  TensorPool pool(28);
  BackwardCase c = make_case(
      pool, batch(pool, DType::bf16, {2, 8, 2, 377, 600, 128, 128}).causal().build(), true);
  expect_bit_identical_repeats(c);
}

TEST_F(BwdSm90Gpu, DeterministicWindowSinksRepeatsAreBitIdentical) {
  TensorPool pool(29);
  BackwardCase c = make_case(pool,
                             batch(pool, DType::fp16, {1, 4, 4, 700, 900, 64, 64})
                                 .window(200, 30)
                                 .sink_tokens(130)
                                 .build(),
                             true);
  expect_bit_identical_repeats(c);
}

// Unmasked deterministic key blocks start at staggered query blocks: more key blocks than query
// blocks (8 of 128 keys over 4 of 64 queries), and fewer (2 over 12), under GQA.
TEST_F(BwdSm90Gpu, DeterministicUnmaskedStaggeredRepeatsAreBitIdentical) {
  TensorPool pool(32);
  BackwardCase wide =
      make_case(pool, batch(pool, DType::bf16, {2, 4, 2, 200, 1000, 128, 128}).build(), true);
  expect_bit_identical_repeats(wide);
  BackwardCase tall =
      make_case(pool, batch(pool, DType::fp16, {1, 4, 1, 760, 250, 64, 64}).build(), true);
  expect_bit_identical_repeats(tall);
}

TEST_F(BwdSm90Gpu, DeterministicVarlenRepeatsAreBitIdentical) {
  TensorPool pool(30);
  BackwardCase c =
      make_case(pool,
                testing::group_problem(pool, Family::fwd, DType::bf16, {0, 300, 300, 700},
                                       {0, 260, 400, 900}, 4, 1, 128, 128)
                    .build(),
                true);
  expect_bit_identical_repeats(c);
}

// dSink (bwd.dsink): the sink logits' gradient, reduced from bwd_dot_do_o's per-CTA partials by
// bwd_convert_dq around this pipeline's dq_dk_dv. Sinks in [1, 4] give the sink a share of each
// row's softmax comparable to the keys', so dSink is far from 0.
TensorView sinks(TensorPool& pool, int64_t heads) {
  return pool.uniform(DType::fp32, {heads}, 1, 4);
}

// Bottom-right causal with more queries than keys: the first rows see only the sink (O = 0, so
// their terms are 0 however large exp(sink - lse) = 1 is), GQA 4:1.
TEST_F(BwdSm90Gpu, DsinkCausalGqaRowsOnlyTheSinkSees) {
  TensorPool pool(40);
  expect_matches_reference(pool,
                           batch(pool, DType::bf16, {2, 8, 2, 350, 200, 64, 64})
                               .causal(MaskAlign::bottom_right)
                               .sink_logits(sinks(pool, 8))
                               .build(),
                           false, std::nullopt, true);
}

// Query lengths 40, 0, 330, 1 over key lengths 35, 20, 400, 0: an empty sequence and one whose
// query sees no key.
TEST_F(BwdSm90Gpu, DsinkVarlenWithEmptySequences) {
  TensorPool pool(41);
  expect_matches_reference(
      pool,
      testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 370, 371},
                             {0, 35, 55, 455, 455}, 8, 2, 128, 128)
          .causal(MaskAlign::bottom_right)
          .sink_logits(sinks(pool, 8))
          .build(),
      false, std::nullopt, true);
}

// More query heads (96) than bwd_dot_do_o has rows per CTA (64): each CTA holds some heads only
// and writes zeros for the others.
TEST_F(BwdSm90Gpu, DsinkMoreHeadsThanRowsPerCta) {
  TensorPool pool(42);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 96, 8, 70, 90, 64, 64}).sink_logits(sinks(pool, 96)).build(),
      false, std::nullopt, true);
}

TEST_F(BwdSm90Gpu, DsinkDeterministicRepeatsAreBitIdentical) {
  TensorPool pool(43);
  BackwardCase c = make_case(pool,
                             batch(pool, DType::bf16, {2, 8, 2, 377, 600, 128, 128})
                                 .causal()
                                 .sink_logits(sinks(pool, 8))
                                 .build(),
                             true, std::nullopt, true);
  expect_bit_identical_repeats(c);
}

TEST_F(BwdSm90Gpu, DsinkRepeatsAreBitIdenticalOutsideDeterministicMode) {
  TensorPool pool(44);
  BackwardCase c =
      make_case(pool,
                testing::group_problem(pool, Family::fwd, DType::bf16, {0, 300, 300, 700},
                                       {0, 260, 400, 900}, 4, 1, 64, 64)
                    .sink_logits(sinks(pool, 4))
                    .build(),
                false, std::nullopt, true);
  expect_dsink_repeats(c);
}

// What the Hopper kernel does not implement finds no sm90_ws kernel: planning says so, naming the
// stage (an unrestricted engine takes sm80_mma instead).
TEST_F(BwdSm90Gpu, Hdim256HasNoHopperKernel) {
  TensorPool pool(31);
  BackwardCase c =
      make_case(pool, batch(pool, DType::bf16, {1, 2, 2, 64, 64, 256, 256}).build(), false);
  try {
    run_on_gpu(c);
    FAIL() << "an sm90_ws-only engine planned hdim 256";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_kernel) << e.what();
    EXPECT_NE(std::string(e.what()).find("stage bwd_dq_dk_dv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilefmha
