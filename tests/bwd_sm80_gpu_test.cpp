// The GPU backward (bwd_dot_do_o, bwd_dq_dk_dv on sm80_mma, bwd_convert_dq) through the public
// Engine, one plan of three stages with D and the dQ accumulator in plan workspace: dQ, dK and
// dV against the CPU reference (reference::backward) on fresh random inputs, outputs poisoned
// (NaN bytes) before each run. Cases: head dims 64, 128, 160, 256 and (192, 128), bf16 and fp16,
// causal top-left and bottom-right, a window with sink tokens, GQA 4:1, soft cap, varlen with an
// empty sequence, ragged lengths (77 x 130), deterministic mode giving bitwise-identical
// repeats, ALiBi, an elementwise bias with dBias (stored, and broadcast summed with atomics),
// dropout, and dSink (batch and varlen, GQA, rows only the sink sees, more heads than rows per
// row-kernel CTA, bitwise repeats in both modes). Skipped without a GPU, driver or NVRTC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "support/backward_gpu.hpp"

namespace tilefmha {
namespace {

using testing::BackwardCase;
using testing::broadcast_bias;
using testing::DeviceView;
using testing::kUnwritten;
using testing::make_case;
using testing::mismatches;
using testing::TensorPool;
using testing::to_device;

// The portable kernels: sm80_mma runs on every arch the engine supports.
using BwdSm80Gpu = testing::BackwardGpuTest<Pipeline::sm80_mma>;

ProblemBuilder batch(TensorPool& pool, DType dtype, testing::Dims d) {
  return testing::batch_backward(pool, dtype, d);
}

TEST_F(BwdSm80Gpu, Bf16Hdim64NoMask) {
  TensorPool pool(1);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 4, 4, 128, 128, 64, 64}).build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim128CausalTopLeftRagged) {
  TensorPool pool(2);
  expect_matches_reference(pool,
                           batch(pool, DType::fp16, {2, 2, 2, 77, 130, 128, 128}).causal().build());
}

TEST_F(BwdSm80Gpu, Bf16Hdim128CausalBottomRightGqa) {
  TensorPool pool(3);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 8, 2, 77, 130, 128, 128})
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim64WindowWithSinkTokensGqa) {
  TensorPool pool(4);
  expect_matches_reference(pool, batch(pool, DType::fp16, {1, 8, 2, 200, 260, 64, 64})
                                     .window(40, 8, MaskAlign::bottom_right)
                                     .sink_tokens(4)
                                     .build());
}

TEST_F(BwdSm80Gpu, Bf16Hdim64SoftCapAndScale) {
  TensorPool pool(5);
  expect_matches_reference(
      pool, batch(pool, DType::bf16, {2, 2, 1, 96, 64, 64, 64}).softcap(5.0).scale(0.3).build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim128VarlenWithEmptySequence) {
  TensorPool pool(6);
  // Query lengths 40, 0, 130, 1 over key lengths 35, 20, 200, 64; bottom-right causal, GQA 4:1.
  expect_matches_reference(
      pool, testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 170, 171},
                                   {0, 35, 55, 255, 319}, 8, 2, 128, 128)
                .causal(MaskAlign::bottom_right)
                .build());
}

TEST_F(BwdSm80Gpu, Bf16Hdim64VarlenTopLeft) {
  TensorPool pool(7);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::bf16, {0, 0, 100, 229},
                                                  {0, 50, 150, 279}, 4, 1, 64, 64)
                               .causal()
                               .build());
}

// More queries than keys under bottom-right causal: the first rows see no key (no gradient).
// Sink logits are in the forward's LSE, all the backward needs of them.
TEST_F(BwdSm80Gpu, Fp16Hdim64FullyMaskedRowsAndSinkLogits) {
  TensorPool pool(10);
  const TensorView sinks = pool.uniform(DType::fp32, {4}, -1, 1);
  expect_matches_reference(pool, batch(pool, DType::fp16, {2, 4, 2, 150, 77, 64, 64})
                                     .causal(MaskAlign::bottom_right)
                                     .sink_logits(sinks)
                                     .build());
}

TEST_F(BwdSm80Gpu, DeterministicRepeatsAreBitIdentical) {
  TensorPool pool(8);
  BackwardCase c = make_case(
      pool, batch(pool, DType::bf16, {2, 8, 2, 77, 300, 128, 128}).causal().build(), true);
  expect_bit_identical_repeats(c);
}

// Head dims past 128: dK and dV split in two column parts (two warps per 16 keys).
TEST_F(BwdSm80Gpu, Bf16Hdim256CausalBottomRightGqa) {
  TensorPool pool(11);
  expect_matches_reference(pool, batch(pool, DType::bf16, {2, 8, 2, 77, 130, 256, 256})
                                     .causal(MaskAlign::bottom_right)
                                     .build());
}

TEST_F(BwdSm80Gpu, Fp16Hdim192x128VarlenDeterministic) {
  TensorPool pool(12);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 192, 128)
                               .causal()
                               .build(),
                           true);
}

TEST_F(BwdSm80Gpu, Bf16Hdim160WindowSoftCap) {
  TensorPool pool(13);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 4, 4, 100, 150, 160, 160}).window(30, 5).softcap(4.0).build());
}

// ALiBi (no gradient for the slopes): per-head slopes with GQA and bottom-right causal; per
// (sequence, head) slopes in group mode with head dim 256.
TEST_F(BwdSm80Gpu, Fp16AlibiPerHeadGqaCausal) {
  TensorPool pool(21);
  expect_matches_reference(pool, batch(pool, DType::fp16, {2, 8, 2, 77, 130, 64, 64})
                                     .causal(MaskAlign::bottom_right)
                                     .alibi(pool.uniform(DType::fp32, {8}, 0.05, 0.5))
                                     .build());
}

TEST_F(BwdSm80Gpu, Bf16AlibiPerSequenceVarlenHdim256) {
  TensorPool pool(22);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::bf16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 256, 256)
                               .alibi(pool.uniform(DType::fp32, {3, 4}, 0.05, 0.3))
                               .build(),
                           true);
}

// An elementwise bias with dBias: per (sequence, head) in fp32 (one store per element); shared
// by sequences and heads in bf16 with an fp32 dBias (atomics); broadcast over queries with the
// (192, 128) column split; group mode with a bf16 dBias and deterministic dQ.
TEST_F(BwdSm80Gpu, Fp16BiasWithDbiasCausalGqa) {
  TensorPool pool(23);
  expect_matches_reference(pool,
                           batch(pool, DType::fp16, {2, 8, 2, 77, 130, 128, 128})
                               .causal()
                               .bias(pool.uniform(DType::fp32, {2, 8, 77, 130}, -2, 2))
                               .build(),
                           false, DType::fp32);
}

TEST_F(BwdSm80Gpu, Bf16BroadcastBiasDbiasSumsOverBatchAndHeads) {
  TensorPool pool(24);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 4, 2, 100, 150, 64, 64})
          .bias(broadcast_bias(pool, DType::bf16, {1, 1, 100, 150}, {2, 4, 100, 150}))
          .build(),
      false, DType::fp32);
}

TEST_F(BwdSm80Gpu, Bf16QueryBroadcastBiasHdim192x128) {
  TensorPool pool(25);
  expect_matches_reference(
      pool,
      batch(pool, DType::bf16, {2, 2, 2, 90, 140, 192, 128})
          .causal(MaskAlign::bottom_right)
          .bias(broadcast_bias(pool, DType::fp32, {2, 2, 1, 140}, {2, 2, 90, 140}))
          .build(),
      false, DType::fp32);
}

TEST_F(BwdSm80Gpu, Fp16VarlenBiasDbiasWindowDeterministic) {
  TensorPool pool(26);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::fp16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 96, 96)
                               .window(30, 8)
                               .bias(pool.uniform(DType::bf16, {3, 4, 130, 200}, -2, 2))
                               .build(),
                           true, DType::bf16);
}

// Dropout replays the forward's Philox stream (same seed and offset).
TEST_F(BwdSm80Gpu, Fp16DropoutCausalGqa) {
  TensorPool pool(27);
  expect_matches_reference(pool, batch(pool, DType::fp16, {2, 8, 2, 77, 130, 128, 128})
                                     .causal(MaskAlign::bottom_right)
                                     .dropout(0.2, 0x1234567890ABCDEFull, 77)
                                     .build());
}

TEST_F(BwdSm80Gpu, Bf16DropoutVarlenHdim256Deterministic) {
  TensorPool pool(28);
  expect_matches_reference(pool,
                           testing::group_problem(pool, Family::fwd, DType::bf16, {0, 40, 40, 170},
                                                  {0, 35, 55, 255}, 4, 2, 256, 256)
                               .causal(MaskAlign::bottom_right)
                               .dropout(0.3, 99, 1ull << 40)
                               .build(),
                           true);
}

// (The enumeration profiles have no soft-capped kernel with bias and dropout: the emulation
// test covers that combination.)
TEST_F(BwdSm80Gpu, Bf16DropoutBiasDbiasCausal) {
  TensorPool pool(29);
  expect_matches_reference(pool,
                           batch(pool, DType::bf16, {2, 4, 4, 96, 128, 64, 64})
                               .causal(MaskAlign::bottom_right)
                               .bias(pool.uniform(DType::bf16, {2, 4, 96, 128}, -2, 2))
                               .dropout(0.15, 5, 6)
                               .build(),
                           false, DType::bf16);
}

// What the GPU backward does not implement is refused when planning: a broadcast dBias is
// summed with fp32 atomics, so a bf16 one has no kernel.
TEST_F(BwdSm80Gpu, UnsupportedFeaturesAreRefusedByName) {
  TensorPool pool(9);
  BackwardCase c =
      make_case(pool,
                batch(pool, DType::bf16, {2, 2, 2, 64, 64, 64, 64})
                    .bias(broadcast_bias(pool, DType::bf16, {1, 2, 64, 64}, {2, 2, 64, 64}))
                    .build(),
                false, DType::bf16);
  Problem d = c.host;
  std::vector<DeviceView> keep;
  for (TensorView* view : {&d.q, &d.k, &d.v, &d.o, &d.lse, &d.bias, &d.bwd.d_o, &d.bwd.dq,
                           &d.bwd.dk, &d.bwd.dv, &d.bwd.dbias}) {
    keep.push_back(to_device(*view, false));
    *view = keep.back().view;
  }
  try {
    engine_->plan(d);
    FAIL() << "a bf16 broadcast dBias planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_kernel);
    EXPECT_NE(std::string(e.what()).find("dbias"), std::string::npos) << e.what();
  }
}

// dSink: the shared cases (support/backward_gpu.hpp) on this pipeline.
TEST_F(BwdSm80Gpu, DsinkCausalGqaRowsOnlyTheSinkSees) {
  dsink_causal_gqa_rows_only_the_sink_sees(140, 128);
}
TEST_F(BwdSm80Gpu, DsinkVarlenWithEmptySequences) {
  dsink_varlen_with_empty_sequences(141);
}
TEST_F(BwdSm80Gpu, DsinkMoreHeadsThanRowsPerCta) {
  dsink_more_heads_than_rows_per_cta(142, 256);
}
TEST_F(BwdSm80Gpu, DsinkDeterministicRepeatsAreBitIdentical) {
  dsink_deterministic_repeats_are_bit_identical(143);
}
TEST_F(BwdSm80Gpu, DsinkRepeatsAreBitIdenticalOutsideDeterministicMode) {
  dsink_repeats_are_bit_identical_outside_deterministic_mode(144);
}

}  // namespace
}  // namespace tilefmha
