// The Hopper backward (bwd_dq_dk_dv on sm90_ws, between the portable row stages) through the
// public Engine restricted to sm90_ws: dQ, dK and dV against the CPU reference on fresh random
// inputs, gradients poisoned before each run. Cases: head dims 64, 128 and 256, bf16 and fp16,
// ragged lengths (partial query and key blocks), causal top-left and bottom-right, a window with
// sink tokens, GQA, soft cap, varlen with an empty sequence, rows that see no key, several key
// blocks per head, a persistent grid with several tiles per CTA, the default mode's turns,
// deterministic mode (bitwise-identical repeats, with the per-query-block turn counters under
// causal, window and varlen masks, staggered unmasked turns over several waves of heads, mirrored
// pairs under masks, and with more key blocks per head than SMs), and dSink (batch and varlen,
// GQA, rows only the sink sees, more heads than rows per row-kernel CTA, bitwise repeats in both
// modes). Skipped without a GPU, driver or NVRTC, or on a GPU other than sm_90.
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

// Unmasked deterministic: every key block sees every query block, in turns from the highest key
// block down; more key blocks than query blocks (8 of 128 keys over 4 of 64 queries), and fewer
// (2 over 12), under GQA.
TEST_F(BwdSm90Gpu, DeterministicUnmaskedRepeatsAreBitIdentical) {
  TensorPool pool(32);
  BackwardCase wide =
      make_case(pool, batch(pool, DType::bf16, {2, 4, 2, 200, 1000, 128, 128}).build(), true);
  expect_bit_identical_repeats(wide);
  BackwardCase tall =
      make_case(pool, batch(pool, DType::fp16, {1, 4, 1, 760, 250, 64, 64}).build(), true);
  expect_bit_identical_repeats(tall);
}

// Outside deterministic mode, unmasked heads of 16 to 64 key blocks take turns at the dQ adds
// anyway, where turns measured faster (codegen::bwd_sm90_takes_turns): the plan's kernel is the
// deterministic one, its turn counters come from the workspace, and repeats give the same bytes.
TEST_F(BwdSm90Gpu, DefaultModeTakesTurnsOverSixteenKeyBlocksOrMore) {
  TensorPool pool(33);
  BackwardCase gqa =
      make_case(pool, batch(pool, DType::bf16, {1, 4, 2, 600, 2100, 128, 128}).build(), false);
  expect_bit_identical_repeats(gqa);
  BackwardCase square =
      make_case(pool, batch(pool, DType::fp16, {2, 2, 2, 2048, 2048, 64, 64}).build(), false);
  expect_bit_identical_repeats(square);
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

// dSink: the shared cases (support/backward_gpu.hpp) on this pipeline.
TEST_F(BwdSm90Gpu, DsinkCausalGqaRowsOnlyTheSinkSees) {
  dsink_causal_gqa_rows_only_the_sink_sees(40, 64);
}
TEST_F(BwdSm90Gpu, DsinkVarlenWithEmptySequences) {
  dsink_varlen_with_empty_sequences(41);
}
TEST_F(BwdSm90Gpu, DsinkMoreHeadsThanRowsPerCta) {
  dsink_more_heads_than_rows_per_cta(42, 64);
}
TEST_F(BwdSm90Gpu, DsinkDeterministicRepeatsAreBitIdentical) {
  dsink_deterministic_repeats_are_bit_identical(43);
}
TEST_F(BwdSm90Gpu, DsinkRepeatsAreBitIdenticalOutsideDeterministicMode) {
  dsink_repeats_are_bit_identical_outside_deterministic_mode(44);
}

// hdim 256: 64 keys per CTA, the consumers split dK/dV's columns, dQ written over the consumed
// Q/dO stage. Ragged query and key blocks, GQA, several key blocks and query blocks.
TEST_F(BwdSm90Gpu, Bf16Hdim256NoMaskGqaRagged) {
  TensorPool pool(33);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 4, 2, 200, 300, 256, 256}).build());
}

TEST_F(BwdSm90Gpu, Fp16Hdim256CausalBottomRightRagged) {
  TensorPool pool(34);
  expect_matches_reference(pool, batch(pool, DType::fp16, {1, 4, 4, 190, 257, 256, 256})
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(BwdSm90Gpu, Bf16Hdim256VarlenWindowSoftCap) {
  TensorPool pool(35);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::bf16, {0, 70, 70, 300},
                                                  {0, 100, 130, 390}, 4, 2, 256, 256)
                               .window(90, 20, MaskAlign::bottom_right)
                               .softcap(4.0)
                               .build());
}

TEST_F(BwdSm90Gpu, DeterministicHdim256RepeatsAreBitIdentical) {
  TensorPool pool(36);
  BackwardCase causal = make_case(
      pool, batch(pool, DType::bf16, {1, 4, 2, 300, 330, 256, 256}).causal().build(), true);
  expect_bit_identical_repeats(causal);
  BackwardCase unmasked =
      make_case(pool, batch(pool, DType::fp16, {2, 2, 1, 260, 200, 256, 256}).build(), true);
  expect_bit_identical_repeats(unmasked);
}

// More key blocks per head than CTAs the GPU holds at once (one per SM): a turn that waited on a
// key block launched later would wait on a CTA that never starts while the resident ones hold
// every SM (the build before this test hung at hdim 256, 16k keys). The run must finish, match
// the reference and repeat bit for bit; few query rows keep the CPU reference cheap.
TEST_F(BwdSm90Gpu, DeterministicMoreKeyBlocksThanSmsFinishes) {
  const int64_t sms = engine_->sm_count();
  TensorPool pool(37);
  BackwardCase unmasked = make_case(
      pool, batch(pool, DType::bf16, {1, 2, 1, 130, (sms + 6) * 64 + 17, 256, 256}).build(), true);
  expect_bit_identical_repeats(unmasked);
  BackwardCase causal = make_case(pool,
                                  batch(pool, DType::fp16, {1, 2, 2, 70, (sms + 3) * 128, 128, 128})
                                      .causal(MaskAlign::bottom_right)
                                      .build(),
                                  true);
  expect_bit_identical_repeats(causal);
}

// Deterministic and unmasked, up to 64 key blocks a head: a cooperative grid of whole heads a
// wave, each key block starting its walk at its own query block and taking turns in the order
// the walks arrive (fmha::Sm90BwdStagger). More heads than a wave holds, under GQA: more query
// blocks than key blocks (2 key blocks over 3 query blocks), and fewer, where walks start
// together and ties go to the higher key block (8 over 2).
TEST_F(BwdSm90Gpu, DeterministicStaggeredTurnsOverSeveralWaves) {
  const int64_t waves = 2;
  const int64_t sequences = engine_->sm_count() / 2 * waves / 2 + 1;  // 2 KV heads a sequence
  TensorPool pool(45);
  BackwardCase more_query_blocks =
      make_case(pool, batch(pool, DType::bf16, {sequences, 4, 2, 300, 200, 64, 64}).build(), true);
  expect_bit_identical_repeats(more_query_blocks);
  BackwardCase fewer_query_blocks = make_case(
      pool,
      batch(pool, DType::fp16, {engine_->sm_count() / 8 + 3, 4, 1, 100, 1000, 128, 128}).build(),
      true);
  expect_bit_identical_repeats(fewer_query_blocks);
}

// Deterministic under a mask, short tiles: mirrored key-block pairs, high key block first, on a
// cooperative grid with more pairs than CTAs (codegen::bwd_sm90_mirrored_pairs): an odd count's
// middle block alone, causal top-left over more keys than queries, a window with sinks under GQA.
TEST_F(BwdSm90Gpu, DeterministicMirroredPairsUnderMasks) {
  const int64_t sequences = engine_->sm_count() / 3 + 4;  // 3 or 4 pairs a sequence
  TensorPool pool(46);
  BackwardCase causal = make_case(
      pool, batch(pool, DType::bf16, {sequences, 2, 1, 500, 600, 128, 128}).causal().build(), true);
  expect_bit_identical_repeats(causal);
  BackwardCase window = make_case(pool,
                                  batch(pool, DType::fp16, {sequences, 4, 2, 300, 330, 64, 64})
                                      .window(100, 20, MaskAlign::bottom_right)
                                      .sink_tokens(3)
                                      .build(),
                                  true);
  expect_bit_identical_repeats(window);
}

// Short tiles, more of them than SMs: a persistent grid, each CTA walking several tiles with its
// ring positions carried over (codegen::bwd_sm90_persistent_grid_pays). Unmasked GQA and causal
// bottom-right; deterministic runs of the same shape take one CTA per tile and repeat bit for bit.
TEST_F(BwdSm90Gpu, PersistentGridSeveralTilesPerCta) {
  const int64_t batch_count = engine_->sm_count() / 3 + 5;  // 3 key blocks x 2 KV heads a sequence
  TensorPool pool(38);
  expect_matches_reference(pool,
                           batch(pool, DType::fp16, {batch_count, 4, 2, 300, 300, 64, 64}).build());
  expect_matches_reference(pool, batch(pool, DType::bf16, {batch_count, 4, 2, 300, 260, 128, 128})
                                     .causal(MaskAlign::bottom_right)
                                     .build());
  BackwardCase deterministic = make_case(
      pool, batch(pool, DType::bf16, {batch_count, 4, 2, 260, 300, 64, 64}).causal().build(), true);
  expect_bit_identical_repeats(deterministic);
}

// Under a mask the persistent kernel takes a head's key blocks in mirrored pairs (n, then
// blocks - 1 - n): long tiles one pair a CTA, an odd count's middle block alone, a window with
// sinks whose pairs see different query blocks (codegen::bwd_sm90_mirrored_pairs).
TEST_F(BwdSm90Gpu, MirroredKeyBlockPairsUnderMasks) {
  TensorPool pool(39);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 8, 2, 1500, 1500, 128, 128})
                                     .causal()
                                     .build());  // 12 key blocks, 24 query blocks
  expect_matches_reference(pool, batch(pool, DType::fp16, {2, 4, 4, 1100, 1300, 64, 64})
                                     .window(200, 50, MaskAlign::bottom_right)
                                     .sink_tokens(4)
                                     .build());  // 11 key blocks
  expect_matches_reference(pool, batch(pool, DType::bf16, {1, 2, 1, 700, 900, 256, 256})
                                     .causal(MaskAlign::bottom_right)
                                     .build());  // hdim 256: 15 key blocks of 64
}

// What the Hopper kernel does not implement finds no sm90_ws kernel: planning says so, naming the
// stage (an unrestricted engine takes sm80_mma instead).
TEST_F(BwdSm90Gpu, Hdim192HasNoHopperKernel) {
  TensorPool pool(31);
  BackwardCase c =
      make_case(pool, batch(pool, DType::bf16, {1, 2, 2, 64, 64, 192, 192}).build(), false);
  try {
    run_on_gpu(c);
    FAIL() << "an sm90_ws-only engine planned hdim 192";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_kernel) << e.what();
    EXPECT_NE(std::string(e.what()).find("stage bwd_dq_dk_dv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilefmha
