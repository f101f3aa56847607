// The forward reference against an independent direct formula (support/naive_forward.hpp) over
// every feature of the forward family, one at a time and in a few combinations.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/forward_problems.hpp"
#include "support/naive_forward.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using namespace tilefmha::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Runs the reference and compares every O / LSE element with the formula.
void expect_forward_matches(const Problem& problem) {
  reference::forward(problem);
  const NaiveForward naive(problem);
  EXPECT_GT(expect_matches_naive(problem, naive), 0);
}

Dims dims(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_q, int64_t seqlen_k,
          int64_t hdim_q, int64_t hdim_v) {
  return {batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_q, hdim_v};
}

TEST(ReferenceForward, NoMask) {
  TensorPool pool(1);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(2, 3, 3, 17, 23, 64, 64)).build());
}

TEST(ReferenceForward, CausalBothAlignmentsAndShapes) {
  for (const MaskAlign align : {MaskAlign::top_left, MaskAlign::bottom_right}) {
    for (const auto& [sq, sk] : {std::pair{7, 19}, std::pair{19, 7}, std::pair{13, 13}}) {
      SCOPED_TRACE(std::string(to_string(align)) + " sq=" + std::to_string(sq) +
                   " sk=" + std::to_string(sk));
      TensorPool pool(2);
      expect_forward_matches(
          batch_problem(pool, Family::fwd, DType::fp32, dims(2, 2, 2, sq, sk, 32, 32))
              .causal(align)
              .build());
    }
  }
}

TEST(ReferenceForward, SlidingWindowsBothAlignments) {
  struct Window {
    int64_t left, right;
  };
  for (const MaskAlign align : {MaskAlign::top_left, MaskAlign::bottom_right}) {
    for (const Window w : {Window{3, 2}, Window{4, 0}, Window{-1, 1}, Window{2, -1}}) {
      SCOPED_TRACE(std::string(to_string(align)) + " window " + std::to_string(w.left) + "," +
                   std::to_string(w.right));
      TensorPool pool(3);
      expect_forward_matches(
          batch_problem(pool, Family::fwd, DType::fp32, dims(1, 2, 2, 11, 21, 32, 32))
              .window(w.left, w.right, align)
              .build());
    }
  }
}

TEST(ReferenceForward, SinkTokensUnderWindow) {
  TensorPool pool(4);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(2, 2, 2, 12, 20, 32, 32))
          .window(3, 0, MaskAlign::bottom_right)
          .sink_tokens(2)
          .build());
  // Top-left with sq > sk: sink tokens must never reach beyond the causal bound.
  TensorPool pool2(5);
  expect_forward_matches(
      batch_problem(pool2, Family::fwd, DType::fp32, dims(1, 2, 2, 16, 9, 32, 32))
          .window(2, 0, MaskAlign::top_left)
          .sink_tokens(3)
          .build());
}

TEST(ReferenceForward, ElementwiseBiasWithBroadcast) {
  const Dims d = dims(2, 3, 3, 9, 14, 32, 32);
  TensorPool pool(6);
  // One [sq, sk] matrix shared by every batch and head.
  const TensorView shared =
      pool.strided(DType::fp32, d.seqlen_q * d.seqlen_k,
                   {d.batch, d.nhead_q, d.seqlen_q, d.seqlen_k}, {0, 0, d.seqlen_k, 1}, -2, 2);
  expect_forward_matches(batch_problem(pool, Family::fwd, DType::fp32, d).bias(shared).build());
  // Per head, broadcast over batch, in bf16.
  const TensorView per_head = pool.strided(DType::bf16, d.nhead_q * d.seqlen_q * d.seqlen_k,
                                           {d.batch, d.nhead_q, d.seqlen_q, d.seqlen_k},
                                           {0, d.seqlen_q * d.seqlen_k, d.seqlen_k, 1}, -2, 2);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, d).bias(per_head).causal().build());
  // Full bias, no broadcast.
  const TensorView full =
      pool.uniform(DType::fp32, {d.batch, d.nhead_q, d.seqlen_q, d.seqlen_k}, -2, 2);
  expect_forward_matches(batch_problem(pool, Family::fwd, DType::fp32, d).bias(full).build());
}

TEST(ReferenceForward, Alibi) {
  const Dims d = dims(2, 4, 2, 10, 15, 32, 32);
  TensorPool pool(7);
  const TensorView per_head = pool.uniform(DType::fp32, {d.nhead_q}, 0.05, 0.5);
  expect_forward_matches(batch_problem(pool, Family::fwd, DType::fp32, d).alibi(per_head).build());
  const TensorView per_batch_head = pool.uniform(DType::fp32, {d.batch, d.nhead_q}, 0.05, 0.5);
  expect_forward_matches(batch_problem(pool, Family::fwd, DType::fp32, d)
                             .alibi(per_batch_head)
                             .causal(MaskAlign::bottom_right)
                             .build());
}

TEST(ReferenceForward, SoftCap) {
  TensorPool pool(8);
  // A large scale pushes logits into tanh's curved range.
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(2, 2, 2, 9, 12, 32, 32), QkvLayout::bshd)
          .scale(1.5)
          .softcap(4.0)
          .build());
}

TEST(ReferenceForward, SinkLogit) {
  const Dims d = dims(2, 3, 3, 8, 11, 32, 32);
  TensorPool pool(9);
  const TensorView sinks = pool.uniform(DType::fp32, {d.nhead_q}, -1, 3);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, d).sink_logits(sinks).build());
  expect_forward_matches(batch_problem(pool, Family::fwd, DType::fp32, d)
                             .sink_logits(sinks)
                             .causal(MaskAlign::top_left)
                             .build());
}

TEST(ReferenceForward, GqaAndMqa) {
  TensorPool pool(10);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(2, 8, 2, 9, 13, 32, 32)).causal().build());
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(2, 4, 1, 9, 13, 32, 32)).build());
}

TEST(ReferenceForward, GroupModeWithEmptySequences) {
  TensorPool pool(11);
  // Sequence 1 has no queries, sequence 2 has queries but no keys (a fully masked group).
  const auto build = [&](MaskKind kind) {
    ProblemBuilder builder = group_problem(pool, Family::fwd, DType::fp32, {0, 5, 5, 12, 21},
                                           {0, 9, 13, 13, 19}, 4, 2, 32, 32);
    if (kind == MaskKind::causal) builder.causal(MaskAlign::bottom_right);
    return builder.build();
  };
  expect_forward_matches(build(MaskKind::none));
  expect_forward_matches(build(MaskKind::causal));
}

TEST(ReferenceForward, StridedLayouts) {
  for (const QkvLayout layout : {QkvLayout::bhsd, QkvLayout::padded}) {
    TensorPool pool(12);
    expect_forward_matches(
        batch_problem(pool, Family::fwd, DType::fp32, dims(2, 4, 2, 10, 14, 64, 64), layout)
            .causal(MaskAlign::bottom_right)
            .build());
  }
}

TEST(ReferenceForward, AsymmetricHeadDims) {
  TensorPool pool(13);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::bf16, dims(1, 2, 1, 9, 12, 192, 128)).build());
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(2, 2, 2, 9, 12, 64, 32), QkvLayout::padded)
          .causal()
          .build());
}

TEST(ReferenceForward, PaddedHeadDims) {
  // Sizes off every vector width (served by padded kernel variants).
  TensorPool pool(21);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(2, 2, 1, 7, 9, 37, 19)).causal().build());
}

TEST(ReferenceForward, HalfPrecisionDtypes) {
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    SCOPED_TRACE(to_string(dtype));
    TensorPool pool(14);
    expect_forward_matches(batch_problem(pool, Family::fwd, dtype, dims(2, 4, 2, 16, 24, 64, 64))
                               .causal(MaskAlign::bottom_right)
                               .build());
  }
}

TEST(ReferenceForward, Fp8PerTensorScales) {
  for (const DType out : {DType::bf16, DType::fp32}) {
    TensorPool pool(15);
    Fp8Scales scales;
    scales.kind = Fp8ScaleKind::per_tensor;
    scales.q_descale = 0.37;
    scales.k_descale = 0.11;
    scales.v_descale = 1.9;
    const Dims d = dims(2, 2, 1, 10, 17, 64, 64);
    ProblemBuilder builder = batch_problem(pool, Family::fwd, DType::fp8_e4m3, d);
    TensorView o = pool.filled(out, {d.batch, d.seqlen_q, d.nhead_q, d.hdim_v}, kUnwritten);
    expect_forward_matches(builder.out_dtype(out).o(o).fp8_scales(scales).causal().build());
  }
}

TEST(ReferenceForward, Fp8PerBlockScales) {
  // Longer than one 128-token block so that every tensor has two scale blocks per head.
  const Dims d = dims(2, 2, 1, 130, 200, 32, 32);
  TensorPool pool(16);
  const auto blocks = [](int64_t seq) { return (seq + kFp8ScaleBlock - 1) / kFp8ScaleBlock; };
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_block;
  scales.q_block = pool.uniform(DType::fp32, {d.batch, d.nhead_q, blocks(d.seqlen_q)}, 0.1, 2);
  scales.k_block = pool.uniform(DType::fp32, {d.batch, d.nhead_k, blocks(d.seqlen_k)}, 0.1, 2);
  scales.v_block = pool.uniform(DType::fp32, {d.batch, d.nhead_k, blocks(d.seqlen_k)}, 0.1, 2);
  expect_forward_matches(batch_problem(pool, Family::fwd, DType::fp8_e4m3, d)
                             .fp8_scales(scales)
                             .causal(MaskAlign::bottom_right)
                             .build());
}

TEST(ReferenceForward, SingleHeadRowsSpreadOverThreads) {
  // One (sequence, head) pair is split into row ranges when threads outnumber pairs; every
  // range must be written exactly as the whole.
  TensorPool pool(22);
  expect_forward_matches(
      batch_problem(pool, Family::fwd, DType::fp32, dims(1, 1, 1, 70, 50, 32, 32))
          .causal()
          .build());
}

TEST(ReferenceForward, FeatureCombination) {
  // GQA + bhsd + window with sink tokens + ALiBi + soft cap + sink logit + group mode.
  TensorPool pool(17);
  const TensorView slopes = pool.uniform(DType::fp32, {4}, 0.05, 0.3);
  const TensorView sinks = pool.uniform(DType::fp32, {4}, -1, 1);
  expect_forward_matches(
      group_problem(pool, Family::fwd, DType::bf16, {0, 7, 20, 21}, {0, 15, 30, 34}, 4, 2, 64, 64)
          .window(5, 1, MaskAlign::bottom_right)
          .sink_tokens(2)
          .alibi(slopes)
          .softcap(6.0)
          .sink_logits(sinks)
          .build());
}

// Rows with no visible key: O = 0 and LSE = -inf (or the sink logit), and no NaN anywhere.
TEST(ReferenceForward, FullyMaskedRows) {
  const Dims d = dims(2, 2, 2, 12, 5, 32, 32);
  TensorPool pool(18);
  // Bottom-right causal with sq > sk: rows i < sq - sk see nothing.
  const Problem causal =
      batch_problem(pool, Family::fwd, DType::fp32, d).causal(MaskAlign::bottom_right).build();
  reference::forward(causal);
  const TensorView sinks = pool.uniform(DType::fp32, {d.nhead_q}, -1, 1);
  const Problem with_sink = batch_problem(pool, Family::fwd, DType::bf16, d)
                                .causal(MaskAlign::bottom_right)
                                .sink_logits(sinks)
                                .build();
  reference::forward(with_sink);
  // A bias of -inf over every key of row 0 masks it as well.
  const TensorView bias =
      pool.uniform(DType::fp32, {d.batch, d.nhead_q, d.seqlen_q, d.seqlen_k}, -1, 1);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.nhead_q; ++h)
      for (int64_t j = 0; j < d.seqlen_k; ++j) numeric::store(bias, {b, h, 0, j}, -kInf);
  const Problem by_bias = batch_problem(pool, Family::fwd, DType::fp32, d).bias(bias).build();
  reference::forward(by_bias);

  int64_t masked_rows = 0;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.nhead_q; ++h) {
      for (int64_t i = 0; i < d.seqlen_q; ++i) {
        const bool masked = i < d.seqlen_q - d.seqlen_k;
        masked_rows += masked;
        for (int64_t dv = 0; dv < d.hdim_v; ++dv) {
          for (const Problem* p : {&causal, &with_sink, &by_bias}) {
            const double o = numeric::load(p->o, {b, i, h, dv});
            ASSERT_FALSE(std::isnan(o));
            if (masked && p != &by_bias) {
              EXPECT_EQ(o, 0.0);
            }
          }
          if (i == 0) {
            EXPECT_EQ(numeric::load(by_bias.o, {b, i, h, dv}), 0.0);
          }
        }
        const double lse = numeric::load(causal.lse, {b, h, i});
        const double lse_sink = numeric::load(with_sink.lse, {b, h, i});
        ASSERT_FALSE(std::isnan(lse));
        ASSERT_FALSE(std::isnan(lse_sink));
        if (masked) {
          EXPECT_EQ(lse, -kInf);
          EXPECT_EQ(lse_sink, static_cast<double>(static_cast<float>(numeric::load(sinks, {h}))));
        } else {
          EXPECT_TRUE(std::isfinite(lse));
        }
        EXPECT_EQ(numeric::load(by_bias.lse, {b, h, 0}), -kInf);
        EXPECT_TRUE(std::isfinite(numeric::load(by_bias.lse, {b, h, 1})));
      }
    }
  }
  EXPECT_EQ(masked_rows, d.batch * d.nhead_q * (d.seqlen_q - d.seqlen_k));
  // The unmasked rows still follow the formula.
  EXPECT_GT(expect_matches_naive(causal, NaiveForward(causal)), 0);
  EXPECT_GT(expect_matches_naive(with_sink, NaiveForward(with_sink)), 0);
}

TEST(ReferenceForward, WithoutLse) {
  TensorPool pool(19);
  const Dims d = dims(1, 2, 2, 6, 6, 32, 32);
  Problem problem = batch_problem(pool, Family::fwd, DType::fp32, d).build();
  problem.return_lse = false;
  problem.lse = {};
  reference::forward(problem);
  EXPECT_GT(expect_matches_naive(problem, NaiveForward(problem)), 0);
}

TEST(ReferenceForward, RejectsDeviceMemory) {
  TensorPool pool(20);
  Problem problem =
      batch_problem(pool, Family::fwd, DType::fp32, dims(1, 1, 1, 4, 4, 32, 32)).build();
  problem.o.space = MemorySpace::device;
  try {
    reference::forward(problem);
    FAIL() << "device memory accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_problem);
    EXPECT_NE(std::string(e.what()).find("o"), std::string::npos);
  }
}

}  // namespace
