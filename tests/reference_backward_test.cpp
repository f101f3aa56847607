// The backward reference against central finite differences of the forward reference, plus the
// properties of its three stages (D = rowsum(dO * O), dQ conversion, determinism, dropout replay).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/philox.h"
#include "core/numeric.hpp"
#include "support/host_tensor.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;
using tilefmha::testing::HostTensor;

namespace {

enum class BiasShape {
  none,
  full,          // [batch, nhead_q, seqlen_q, seqlen_k]
  shared_batch,  // one [nhead_q, seqlen_q, seqlen_k] for every batch (batch stride 0)
  per_key,       // one row of seqlen_k per batch (head and query strides 0), key padding style
};

struct Case {
  int64_t batch = 2, nhead_q = 2, nhead_k = 1, seqlen_q = 5, seqlen_k = 7, hdim_q = 8, hdim_v = 8;
  std::vector<int64_t> seqstart_q, seqstart_k;  // group mode when set
  BiasShape bias = BiasShape::none;
  bool alibi = false;
  bool sink_logit = false;
  // Sink logits start at sink_base - 0.7 * h: larger values give the sink a larger share.
  double sink_base = 0.4;
  // Mask, soft cap, dropout: anything the builder sets that needs no tensor.
  std::function<void(ProblemBuilder&)> features = [](ProblemBuilder&) {};
  DType dtype = DType::fp32;
};

// Every tensor of one forward + backward problem, filled at random (fixed seed).
class Attention {
 public:
  explicit Attention(Case spec, uint64_t seed = 7) : s_(std::move(spec)) {
    const bool group = !s_.seqstart_q.empty();
    if (group) derive_group_shape();
    const int64_t rows_b = group ? 1 : s_.batch;
    const int64_t rows_q = group ? s_.seqstart_q.back() : s_.seqlen_q;
    const int64_t rows_k = group ? s_.seqstart_k.back() : s_.seqlen_k;
    const DType t = s_.dtype;
    const DType out = default_out_dtype(t);  // the builder's out_dtype
    q = HostTensor(t, {rows_b, rows_q, s_.nhead_q, s_.hdim_q});
    k = HostTensor(t, {rows_b, rows_k, s_.nhead_k, s_.hdim_q});
    v = HostTensor(t, {rows_b, rows_k, s_.nhead_k, s_.hdim_v});
    o = HostTensor(out, {rows_b, rows_q, s_.nhead_q, s_.hdim_v});
    d_o = HostTensor(out, {rows_b, rows_q, s_.nhead_q, s_.hdim_v});
    dq = HostTensor(out, {rows_b, rows_q, s_.nhead_q, s_.hdim_q});
    dk = HostTensor(out, {rows_b, rows_k, s_.nhead_k, s_.hdim_q});
    dv = HostTensor(out, {rows_b, rows_k, s_.nhead_k, s_.hdim_v});
    dq_acc = HostTensor(DType::fp32, {rows_b, rows_q, s_.nhead_q, s_.hdim_q});
    lse = HostTensor(DType::fp32, {rows_b, s_.nhead_q, rows_q});
    d = HostTensor(DType::fp32, {rows_b, s_.nhead_q, rows_q});
    make_bias();
    std::mt19937_64 rng(seed);
    for (HostTensor* tensor : {&q, &k, &v, &d_o, &bias}) tensor->fill_uniform(rng, -1.0, 1.0);
    if (s_.alibi) {
      slopes = HostTensor(DType::fp32, {s_.nhead_q});
      for (int64_t h = 0; h < s_.nhead_q; ++h) slopes.set({h}, 0.25 * (h + 1));
    }
    if (s_.sink_logit) {
      sinks = HostTensor(DType::fp32, {s_.nhead_q});
      for (int64_t h = 0; h < s_.nhead_q; ++h) sinks.set({h}, s_.sink_base - 0.7 * h);
      dsink = HostTensor(DType::fp32, {s_.nhead_q});
    }
  }

  ProblemBuilder builder(Family family) const {
    ProblemBuilder b(family);
    b.dtype(s_.dtype).shape(s_.batch, s_.nhead_q, s_.nhead_k, s_.seqlen_q, s_.seqlen_k, s_.hdim_q,
                            s_.hdim_v);
    if (!s_.seqstart_q.empty()) b.group(s_.seqstart_q, s_.seqstart_k);
    b.q(q.view()).k(k.view()).v(v.view()).o(o.view()).lse(lse.view());
    if (s_.bias != BiasShape::none) b.bias(bias.view());
    if (s_.alibi) b.alibi(slopes.view());
    if (s_.sink_logit) b.sink_logits(sinks.view());
    s_.features(b);
    return b;
  }

  Problem forward_problem() const { return builder(Family::fwd).build(); }

  Problem backward_problem() const {
    Backward bwd;
    bwd.d_o = d_o.view();
    bwd.dq = dq.view();
    bwd.dk = dk.view();
    bwd.dv = dv.view();
    bwd.d = d.view();
    bwd.dq_acc = dq_acc.view();
    if (s_.bias != BiasShape::none) bwd.dbias = dbias.view();
    if (s_.sink_logit) bwd.dsink = dsink.view();
    return builder(Family::bwd_dq_dk_dv).backward(bwd).build();
  }

  // L = sum(dO * O) of the forward at the current inputs, in double.
  double loss() {
    reference::forward(forward_problem());
    double sum = 0.0;
    for (int64_t e = 0; e < o.elements(); ++e)
      sum += numeric::load(o.view().data, o.view().dtype, e) *
             numeric::load(d_o.view().data, d_o.view().dtype, e);
    return sum;
  }

  void forward_and_backward() {
    reference::forward(forward_problem());
    reference::backward(backward_problem());
  }

  const Case& spec() const { return s_; }

  HostTensor q, k, v, o, d_o, dq, dk, dv, dq_acc, lse, d, bias, dbias, slopes, sinks, dsink;

 private:
  // Group mode: batch and the longest sequences come from the prefix sums, as in the builder.
  void derive_group_shape() {
    s_.batch = static_cast<int64_t>(s_.seqstart_q.size()) - 1;
    s_.seqlen_q = s_.seqlen_k = 0;
    for (int64_t b = 0; b < s_.batch; ++b) {
      s_.seqlen_q = std::max(s_.seqlen_q, s_.seqstart_q[b + 1] - s_.seqstart_q[b]);
      s_.seqlen_k = std::max(s_.seqlen_k, s_.seqstart_k[b + 1] - s_.seqstart_k[b]);
    }
  }

  void make_bias() {
    const int64_t b = s_.batch, h = s_.nhead_q, sq = s_.seqlen_q, sk = s_.seqlen_k;
    for (HostTensor* tensor : {&bias, &dbias}) {
      switch (s_.bias) {
        case BiasShape::none: break;
        case BiasShape::full: *tensor = HostTensor(DType::fp32, {b, h, sq, sk}); break;
        case BiasShape::shared_batch:
          *tensor = HostTensor(DType::fp32, h * sq * sk, {b, h, sq, sk}, {0, sq * sk, sk, 1});
          break;
        case BiasShape::per_key:
          *tensor = HostTensor(DType::fp32, b * sk, {b, h, sq, sk}, {sk, 0, 0, 1});
          break;
      }
    }
  }

  Case s_;
};

double max_abs(const HostTensor& tensor) {
  double m = 0.0;
  for (int64_t e = 0; e < tensor.elements(); ++e)
    m = std::max(m, std::abs(numeric::load(tensor.view().data, tensor.view().dtype, e)));
  return m;
}

// Central difference of the loss for every stored element of `input` against the analytic
// gradient stored at the same element of `gradient` (same layout, broadcast included, so a
// shared bias element is compared with the sum over everything that reads it).
void expect_matches_finite_differences(Attention& a, HostTensor& input, const HostTensor& gradient,
                                       const std::string& name) {
  constexpr double kStep = 2e-3;
  constexpr double kAbsTolerance = 2e-4;
  constexpr double kRelTolerance = 2e-3;
  ASSERT_EQ(input.elements(), gradient.elements()) << name;
  const TensorView& view = input.view();
  int failures = 0;
  for (int64_t e = 0; e < input.elements() && failures < 5; ++e) {
    const double original = numeric::load(view.data, view.dtype, e);
    numeric::store(view.data, view.dtype, e, original + kStep);
    const double plus = numeric::load(view.data, view.dtype, e);
    const double loss_plus = a.loss();
    numeric::store(view.data, view.dtype, e, original - kStep);
    const double minus = numeric::load(view.data, view.dtype, e);
    const double loss_minus = a.loss();
    numeric::store(view.data, view.dtype, e, original);
    // The stored steps are the fp32-rounded ones, so divide by what was actually applied.
    const double numeric_grad = (loss_plus - loss_minus) / (plus - minus);
    const double analytic = numeric::load(gradient.view().data, gradient.view().dtype, e);
    const double tolerance = kAbsTolerance + kRelTolerance * std::abs(numeric_grad);
    if (std::abs(analytic - numeric_grad) > tolerance) ++failures;
    EXPECT_NEAR(analytic, numeric_grad, tolerance) << name << " element " << e;
  }
}

void check_gradients(Case spec) {
  Attention a(std::move(spec));
  a.forward_and_backward();
  // A gradient that vanished everywhere would match any loss that ignores the input.
  EXPECT_GT(max_abs(a.dq), 1e-2);
  EXPECT_GT(max_abs(a.dk), 1e-2);
  EXPECT_GT(max_abs(a.dv), 1e-2);
  expect_matches_finite_differences(a, a.q, a.dq, "dQ");
  expect_matches_finite_differences(a, a.k, a.dk, "dK");
  expect_matches_finite_differences(a, a.v, a.dv, "dV");
  if (a.spec().bias != BiasShape::none) {
    EXPECT_GT(max_abs(a.dbias), 1e-2);
    expect_matches_finite_differences(a, a.bias, a.dbias, "dBias");
  }
  // dSink against the loss's derivative in each head's sink logit.
  if (a.spec().sink_logit) {
    EXPECT_GT(max_abs(a.dsink), 1e-2);
    expect_matches_finite_differences(a, a.sinks, a.dsink, "dSink");
  }
}

TEST(ReferenceBackward, GradientsNoMaskGqa) {
  check_gradients({});
}

TEST(ReferenceBackward, GradientsMultiHeadAsymmetricHeadDims) {
  Case s;
  s.nhead_k = 2;
  s.hdim_v = 5;
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsKeysSpanSeveralTasks) {
  Case s;  // dK/dV are computed per block of keys; 45 keys cross block boundaries
  s.seqlen_q = 3;
  s.seqlen_k = 45;
  s.features = [](ProblemBuilder& b) { b.window(20, 0, MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsCausalTopLeft) {
  Case s;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::top_left); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsCausalBottomRight) {
  Case s;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsCausalBottomRightWithFullyMaskedRows) {
  Case s;  // more queries than keys: the first two rows see no key (LSE = -inf)
  s.seqlen_q = 7;
  s.seqlen_k = 5;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsSlidingWindowWithSinkTokens) {
  Case s;
  s.features = [](ProblemBuilder& b) { b.window(2, 1, MaskAlign::top_left).sink_tokens(1); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsSlidingWindowBottomRight) {
  Case s;
  s.features = [](ProblemBuilder& b) { b.window(1, 0, MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsAlibi) {
  Case s;
  s.alibi = true;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsSoftCap) {
  Case s;
  // Logits reach about +-2.8 at this scale, well into tanh's curved range for cap 1.5.
  s.features = [](ProblemBuilder& b) { b.scale(1.0).softcap(1.5); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsFullBias) {
  Case s;
  s.bias = BiasShape::full;
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsBiasSharedOverBatch) {
  Case s;
  s.bias = BiasShape::shared_batch;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::top_left); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsBiasBroadcastOverHeadsAndQueries) {
  Case s;
  s.bias = BiasShape::per_key;
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsGroupModeWithEmptySequences) {
  Case s;  // sequence 1 has no queries, sequence 2 has queries but no keys
  s.seqstart_q = {0, 3, 3, 7};
  s.seqstart_k = {0, 4, 6, 6};
  s.bias = BiasShape::full;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsDropout) {
  Case s;
  s.features = [](ProblemBuilder& b) { b.dropout(0.3, 0x1234'5678'9abcULL, 17); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsSinkLogit) {
  Case s;
  s.sink_logit = true;
  s.features = [](ProblemBuilder& b) { b.window(3, 0, MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsSinkLogitCausalGqa) {
  Case s;  // four query heads over two KV heads
  s.nhead_q = 4;
  s.nhead_k = 2;
  s.sink_logit = true;
  s.sink_base = 1.5;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::top_left); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsSinkLogitRowsOnlyTheSinkSees) {
  Case s;  // more queries than keys: the first two rows see only the sink (LSE = sink, O = 0)
  s.seqlen_q = 7;
  s.seqlen_k = 5;
  s.sink_logit = true;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::bottom_right); };
  check_gradients(s);
}

TEST(ReferenceBackward, GradientsSinkLogitGroupModeWithEmptySequences) {
  Case s;  // sequence 1 has no queries, sequence 2 has queries but no keys (only the sink)
  s.seqstart_q = {0, 3, 3, 7};
  s.seqstart_k = {0, 4, 6, 6};
  s.nhead_q = 4;
  s.nhead_k = 2;
  s.sink_logit = true;
  s.sink_base = 1.0;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::bottom_right); };
  check_gradients(s);
}

// dSink is -sum of exp(sink - lse) * D over the rows of each head: a row that sees only the sink
// has O = 0, hence D = 0, and adds nothing even though its sink probability is 1.
TEST(ReferenceBackward, DsinkIsTheSinkProbabilityWeightedRowSum) {
  Case s;
  s.seqstart_q = {0, 2, 5};
  s.seqstart_k = {0, 0, 4};  // sequence 0 has no keys at all
  s.sink_logit = true;
  Attention a(s);
  a.forward_and_backward();
  for (int64_t h = 0; h < a.spec().nhead_q; ++h) {
    const double sink = a.sinks.at({h});
    double expected = 0.0;
    for (int64_t t = 0; t < 5; ++t) {
      const double lse = a.lse.at({0, h, t});
      if (t < 2) {
        EXPECT_EQ(lse, sink) << "a row without keys has the sink alone in its denominator";
        EXPECT_EQ(a.d.at({0, h, t}), 0.0) << "and O = 0";
      }
      expected -= std::exp(sink - lse) * a.d.at({0, h, t});
    }
    EXPECT_NEAR(a.dsink.at({h}), expected, 1e-6 * (1.0 + std::abs(expected))) << "head " << h;
    EXPECT_NE(a.dsink.at({h}), 0.0) << "head " << h;
  }
}

// The backward overwrites dSink (a stale value is not added to) and repeats it bit for bit.
TEST(ReferenceBackward, DsinkIsOverwrittenAndRepeatsBitwise) {
  Case s;
  s.sink_logit = true;
  Attention a(s);
  a.dsink.fill(1e30);
  a.forward_and_backward();
  const int64_t heads = a.spec().nhead_q;
  std::vector<double> first(heads);
  for (int64_t h = 0; h < heads; ++h) {
    first[h] = a.dsink.at({h});
    EXPECT_LT(std::abs(first[h]), 10.0) << "head " << h;
  }
  a.dsink.fill(-1e30);
  a.forward_and_backward();
  for (int64_t h = 0; h < heads; ++h) EXPECT_EQ(a.dsink.at({h}), first[h]) << "head " << h;
}

TEST(ReferenceBackward, DotDoOIsTheRowSumOfStoredValues) {
  Case s;
  s.dtype = DType::bf16;
  s.seqstart_q = {0, 4, 4, 9};
  s.seqstart_k = {0, 3, 5, 9};
  Attention a(s);
  std::mt19937_64 rng(3);
  a.o.fill_uniform(rng, -2.0, 2.0);
  a.d.fill(-1.0e30);
  Problem p = a.backward_problem();
  p.family = Family::bwd_dot_do_o;
  reference::backward_dot_do_o(p);
  for (int64_t h = 0; h < s.nhead_q; ++h) {
    for (int64_t t = 0; t < s.seqstart_q.back(); ++t) {
      double sum = 0.0;
      for (int64_t c = 0; c < s.hdim_v; ++c) sum += a.o.at({0, t, h, c}) * a.d_o.at({0, t, h, c});
      EXPECT_EQ(a.d.at({0, h, t}), numeric::round_to(DType::fp32, sum)) << "h " << h << " t " << t;
    }
  }
}

TEST(ReferenceBackward, ConvertDqRoundsTheAccumulator) {
  Case s;
  s.dtype = DType::fp16;
  Attention a(s);
  std::mt19937_64 rng(5);
  a.dq_acc.fill_uniform(rng, -3.0, 3.0);
  // dQ in bhsd memory order: the conversion must follow both views' strides.
  a.dq = HostTensor(DType::fp16, {s.batch, s.seqlen_q, s.nhead_q, s.hdim_q});
  a.dq.view() = bhsd(a.dq.view().data, DType::fp16, s.batch, s.seqlen_q, s.nhead_q, s.hdim_q);
  Problem p = a.backward_problem();
  p.family = Family::bwd_convert_dq;
  reference::backward_convert_dq(p);
  int64_t changed_by_rounding = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.seqlen_q; ++i)
      for (int64_t h = 0; h < s.nhead_q; ++h)
        for (int64_t c = 0; c < s.hdim_q; ++c) {
          const double acc = a.dq_acc.at({b, i, h, c});
          EXPECT_EQ(a.dq.at({b, i, h, c}), numeric::round_to(DType::fp16, acc));
          changed_by_rounding += a.dq.at({b, i, h, c}) != acc;
        }
  EXPECT_GT(changed_by_rounding, 0);  // fp16 output really is a rounding, not a copy
}

std::vector<uint8_t> bytes_of(const HostTensor& tensor) {
  const auto* data = static_cast<const uint8_t*>(tensor.view().data);
  return {data, data + tensor.elements() * dtype_size(tensor.view().dtype)};
}

TEST(ReferenceBackward, RepeatedRunsAreBitwiseIdentical) {
  Case s;
  s.nhead_q = 4;
  s.nhead_k = 2;
  s.seqlen_q = 33;
  s.seqlen_k = 40;
  s.hdim_q = s.hdim_v = 16;
  s.bias = BiasShape::shared_batch;
  s.features = [](ProblemBuilder& b) { b.causal(MaskAlign::bottom_right).dropout(0.2, 99); };
  Attention a(s);
  reference::forward(a.forward_problem());
  Problem p = a.backward_problem();
  p.bwd.deterministic = true;
  reference::backward(p);
  const std::vector<HostTensor*> outputs = {&a.dq, &a.dk, &a.dv, &a.dbias, &a.dq_acc};
  std::vector<std::vector<uint8_t>> first;
  for (HostTensor* t : outputs) {
    first.push_back(bytes_of(*t));
    t->fill(std::nan(""));
  }
  reference::backward(p);
  for (size_t n = 0; n < outputs.size(); ++n)
    EXPECT_TRUE(bytes_of(*outputs[n]) == first[n]) << "output " << n;
}

// With V = identity (key j has value e_j) and one query row whose dO is all ones, forward gives
// O[i, j] = P_ij Z_ij and backward gives dV_j = P_ij Z_ij * 1: both vanish exactly for the
// dropped pairs, and P > 0 elsewhere (no mask), so the zero patterns are the dropout masks.
TEST(ReferenceBackward, DropoutDropsTheSameElementsAsForward) {
  Case s;
  s.nhead_k = s.nhead_q = 2;
  s.seqlen_q = 3;
  s.seqlen_k = s.hdim_q = s.hdim_v = 16;
  constexpr double kP = 0.4;
  constexpr uint64_t kSeed = 0xfeed'beefULL, kOffset = 5;
  s.features = [](ProblemBuilder& b) { b.dropout(kP, kSeed, kOffset); };
  Attention a(s);
  a.v.fill(0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.seqlen_k; ++j)
      for (int64_t h = 0; h < s.nhead_k; ++h) a.v.set({b, j, h, j}, 1.0);
  reference::forward(a.forward_problem());
  int64_t dropped = 0, total = 0;
  for (int64_t row = 0; row < s.seqlen_q; ++row) {
    a.d_o.fill(0.0);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.nhead_q; ++h)
        for (int64_t c = 0; c < s.hdim_v; ++c) a.d_o.set({b, row, h, c}, 1.0);
    reference::backward(a.backward_problem());
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.nhead_q; ++h)
        for (int64_t j = 0; j < s.seqlen_k; ++j) {
          const bool forward_dropped = a.o.at({b, row, h, j}) == 0.0;
          const bool backward_dropped = a.dv.at({b, j, h, 0}) == 0.0;
          const unsigned word = philox::dropout_word(kSeed, kOffset, b, h, s.nhead_q, row, j);
          const bool spec_dropped = !philox::dropout_keep(word, philox::dropout_threshold(kP));
          EXPECT_EQ(forward_dropped, spec_dropped) << b << " " << h << " " << row << " " << j;
          EXPECT_EQ(backward_dropped, spec_dropped) << b << " " << h << " " << row << " " << j;
          dropped += spec_dropped;
          ++total;
        }
  }
  // Both outcomes occur, so the comparison above distinguishes something.
  EXPECT_GT(dropped, total / 5);
  EXPECT_LT(dropped, total * 3 / 5);
}

TEST(ReferenceBackward, Fp8InputsAreNotSupported) {
  Case s;
  s.dtype = DType::fp8_e4m3;
  Attention a(s);
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  Problem p = a.builder(Family::bwd_dq_dk_dv).fp8_scales(scales).peek();
  p.bwd.d_o = a.d_o.view();
  p.bwd.dq = a.dq.view();
  p.bwd.dk = a.dk.view();
  p.bwd.dv = a.dv.view();
  p.bwd.d = a.d.view();
  p.bwd.dq_acc = a.dq_acc.view();
  try {
    reference::backward_dq_dk_dv(p);
    FAIL() << "fp8 backward ran";
  } catch (const Error& error) {
    // The validator may refuse first (invalid_problem); the reference says not_supported.
    EXPECT_TRUE(error.kind() == ErrorKind::not_supported ||
                error.kind() == ErrorKind::invalid_problem)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("fp8_e4m3"), std::string::npos) << error.what();
  }
}

// All three stages are validated before the first runs: a problem the last stage refuses (no
// dq) leaves D, dk and dv as they were (they used to be written before the error).
TEST(ReferenceBackward, AProblemALaterStageRefusesWritesNothing) {
  Attention a(Case{});
  reference::forward(a.forward_problem());
  Problem p = a.backward_problem();
  p.bwd.dq = {};
  auto values = [](const HostTensor& t) {
    std::vector<double> out;
    for (int64_t e = 0; e < t.elements(); ++e)
      out.push_back(numeric::load(t.view().data, t.view().dtype, e));
    return out;
  };
  const auto d = values(a.d), dk = values(a.dk), dv = values(a.dv);
  try {
    reference::backward(p);
    FAIL() << "a backward without dq ran";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("bwd.dq is missing"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(values(a.d), d);
  EXPECT_EQ(values(a.dk), dk);
  EXPECT_EQ(values(a.dv), dv);
  // The same problem with dq runs and writes dk (the check above is not vacuous).
  p.bwd.dq = a.dq.view();
  reference::backward(p);
  EXPECT_NE(values(a.dk), dk);
}

}  // namespace
