// The append-KV problem model on the CPU: RoPE angles computed from a base (rope_theta) instead
// of tables, per-sequence RoPE position offsets, the append -> attend problem (a fwd_appendkv with
// O) in the reference, and validation of all three, of cache capacity and of device key lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "support/host_tensor.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {
namespace {

using testing::HostTensor;

constexpr int64_t kBatch = 3, kHeadsQ = 4, kHeadsK = 2, kDim = 16, kNew = 2, kCapacity = 12;

// A contiguous fp32 append problem with its own tensors: cached lengths {5, 0, 9} (a sequence
// with an empty cache), random new tokens, Q and caches.
struct AppendSetup {
  std::vector<int64_t> lengths = {5, 0, 9};
  HostTensor k_cache{DType::fp32, {kBatch, kCapacity, kHeadsK, kDim}};
  HostTensor v_cache{DType::fp32, {kBatch, kCapacity, kHeadsK, kDim}};
  HostTensor k_new{DType::fp32, {kBatch, kNew, kHeadsK, kDim}};
  HostTensor v_new{DType::fp32, {kBatch, kNew, kHeadsK, kDim}};
  HostTensor q{DType::fp32, {kBatch, kNew, kHeadsQ, kDim}};
  HostTensor o{DType::fp32, {kBatch, kNew, kHeadsQ, kDim}};

  explicit AppendSetup(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (HostTensor* x : {&k_cache, &v_cache, &k_new, &v_new, &q}) x->fill_uniform(rng, -1, 1);
    o.fill(std::nan(""));
  }

  AppendKv spec(RopeKind rope, int64_t rotary_dim) const {
    AppendKv a;
    a.seqlen_knew = kNew;
    a.k_new = k_new.view();
    a.v_new = v_new.view();
    a.rope = rope;
    a.rotary_dim = rotary_dim;
    return a;
  }

  ProblemBuilder builder(AppendKv append) const {
    ProblemBuilder b(Family::fwd_appendkv);
    b.dtype(DType::fp32).shape(kBatch, kHeadsQ, kHeadsK, kNew, kCapacity, kDim, kDim);
    b.key_lengths(lengths).q(q.view()).k(k_cache.view()).v(v_cache.view());
    return b.append(std::move(append));
  }
};

// The test's own RoPE: pair (x1, x2) times cos + i sin of position * theta^(-2f / rotary_dim).
std::vector<double> rotated(std::vector<double> row, RopeKind rope, int64_t rotary_dim,
                            double theta, int64_t position) {
  const int64_t half = rotary_dim / 2;
  for (int64_t f = 0; f < half; ++f) {
    const int64_t re = rope == RopeKind::interleaved ? 2 * f : f;
    const int64_t im = rope == RopeKind::interleaved ? 2 * f + 1 : f + half;
    const double angle = position * std::pow(theta, -2.0 * f / rotary_dim);
    const std::complex<double> z = std::complex<double>(row[re], row[im]) * std::polar(1.0, angle);
    row[re] = z.real();
    row[im] = z.imag();
  }
  return row;
}

std::vector<double> row_of(const HostTensor& x, int64_t b, int64_t s, int64_t h) {
  std::vector<double> row(kDim);
  for (int64_t d = 0; d < kDim; ++d) row[d] = x.at({b, s, h, d});
  return row;
}

std::string validation_error(const Problem& p) {
  try {
    validate(p);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_problem) << e.what();
    return e.what();
  }
  return {};
}

void expect_error(const Problem& p, const std::string& fragment) {
  const std::string message = validation_error(p);
  EXPECT_NE(message.find(fragment), std::string::npos)
      << "expected \"" << fragment << "\" in: " << message;
}

// Rope from a base rotates new keys (and Q) at cached length + t + offset, while the tokens land
// at cached length + t; the offsets move positions, never slots.
TEST(AppendKvModel, ThetaAndPositionOffsetsRotateAtShiftedPositions) {
  for (RopeKind rope : {RopeKind::interleaved, RopeKind::half_rotated}) {
    AppendSetup s(3);
    const HostTensor q_before = [&] {
      HostTensor copy(DType::fp32, {kBatch, kNew, kHeadsQ, kDim});
      for (int64_t i = 0; i < copy.elements(); ++i)
        static_cast<float*>(copy.view().data)[i] = static_cast<float*>(s.q.view().data)[i];
      return copy;
    }();
    AppendKv a = s.spec(rope, 10);  // rotary_dim < hdim: dims 10..15 pass through
    a.rope_theta = 500.0;
    a.rope_position_offsets = {7, 3, 0};
    a.rotate_q = true;
    reference::run(s.builder(a).build());
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t t = 0; t < kNew; ++t)
        for (int64_t h = 0; h < kHeadsK; ++h) {
          const int64_t position = s.lengths[b] + t + a.rope_position_offsets[b];
          const auto expected = rotated(row_of(s.k_new, b, t, h), rope, 10, 500.0, position);
          for (int64_t d = 0; d < kDim; ++d) {
            EXPECT_NEAR(s.k_cache.at({b, s.lengths[b] + t, h, d}), expected[d], 1e-6)
                << to_string(rope) << " b " << b << " t " << t << " d " << d;
            EXPECT_EQ(s.v_cache.at({b, s.lengths[b] + t, h, d}), s.v_new.at({b, t, h, d}));
          }
        }
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t h = 0; h < kHeadsQ; ++h) {
        const int64_t position = s.lengths[b] + 1 + a.rope_position_offsets[b];
        const auto expected = rotated(row_of(q_before, b, 1, h), rope, 10, 500.0, position);
        for (int64_t d = 0; d < kDim; ++d) EXPECT_NEAR(s.q.at({b, 1, h, d}), expected[d], 1e-6);
      }
  }
}

// Tables filled from the same base give what the base computes (up to the tables' fp32).
TEST(AppendKvModel, ThetaMatchesTablesOfTheSameBase) {
  AppendSetup from_theta(5), from_tables(5);
  AppendKv a = from_theta.spec(RopeKind::half_rotated, kDim);
  a.rope_theta = 10000.0;
  reference::run(from_theta.builder(a).build());
  HostTensor cos(DType::fp32, {16, kDim / 2}), sin(DType::fp32, {16, kDim / 2});
  for (int64_t position = 0; position < 16; ++position)
    for (int64_t f = 0; f < kDim / 2; ++f) {
      const double angle = position * std::pow(10000.0, -2.0 * f / kDim);
      cos.set({position, f}, std::cos(angle));
      sin.set({position, f}, std::sin(angle));
    }
  AppendKv b = from_tables.spec(RopeKind::half_rotated, kDim);
  b.rope_cos = cos.view();
  b.rope_sin = sin.view();
  reference::run(from_tables.builder(b).build());
  for (int64_t i = 0; i < from_theta.k_cache.elements(); ++i)
    EXPECT_NEAR(static_cast<float*>(from_theta.k_cache.view().data)[i],
                static_cast<float*>(from_tables.k_cache.view().data)[i], 1e-6);
}

// A fwd_appendkv with O appends, then attends over cached + new keys: O equals a forward the
// test builds itself over the appended caches with lengths + seqlen_knew.
TEST(AppendKvModel, AppendWithOutputAttendsOverTheAppendedCache) {
  AppendSetup s(7);
  AppendKv a = s.spec(RopeKind::interleaved, kDim);
  a.rope_theta = 10000.0;
  a.rotate_q = true;
  const Problem chained = s.builder(a).o(s.o.view()).causal(MaskAlign::bottom_right).build();
  ASSERT_TRUE(appends_then_attends(chained));
  reference::run(chained);

  HostTensor o(DType::fp32, {kBatch, kNew, kHeadsQ, kDim});
  std::vector<int64_t> after = s.lengths;
  for (int64_t& n : after) n += kNew;
  ProblemBuilder forward(Family::fwd);
  forward.dtype(DType::fp32).shape(kBatch, kHeadsQ, kHeadsK, kNew, kCapacity, kDim, kDim);
  forward.key_lengths(after).q(s.q.view()).k(s.k_cache.view()).v(s.v_cache.view());
  forward.o(o.view()).causal(MaskAlign::bottom_right);
  reference::run(forward.build());
  for (int64_t i = 0; i < o.elements(); ++i) {
    const float got = static_cast<float*>(s.o.view().data)[i];
    ASSERT_FALSE(std::isnan(got)) << "O element " << i << " was not written";
    EXPECT_FLOAT_EQ(got, static_cast<float*>(o.view().data)[i]);
  }
  // Without O the problem only appends.
  AppendSetup plain(7);
  EXPECT_FALSE(appends_then_attends(plain.builder(plain.spec(RopeKind::none, 0)).build()));
}

TEST(AppendKvModel, AttentionAfterAppendCountsTheNewKeys) {
  AppendSetup s(1);
  const Problem chained = s.builder(s.spec(RopeKind::none, 0)).o(s.o.view()).build();
  const Problem attend = attention_after_append(chained);
  EXPECT_EQ(attend.family, Family::fwd);
  EXPECT_EQ(attend.seqlen_k_per_batch, (std::vector<int64_t>{7, 2, 11}));
  EXPECT_EQ(attend.seqlen_k, kCapacity);  // the CLI's seqlen_k: the capacity covers them
  EXPECT_EQ(attend.append.seqlen_knew, 0);
  // Device lengths: the contiguous cache is read as K/V of its capacity, which bounds them.
  Problem on_device = chained;
  on_device.seqlen_k_per_batch.clear();
  on_device.seqlen_k = 9;
  on_device.device_indices.seqlen_k = reinterpret_cast<const int64_t*>(uintptr_t{1} << 20);
  const Problem attend_device = attention_after_append(on_device);
  EXPECT_EQ(attend_device.seqlen_k, kCapacity);
  EXPECT_EQ(attend_device.device_indices.seqlen_k, on_device.device_indices.seqlen_k);
}

TEST(AppendKvValidation, CapacityOverflowNamesTheSequenceNotTheRopeTables) {
  AppendSetup s(2);
  s.lengths = {5, 0, 11};  // 11 + 2 > 12
  HostTensor cos(DType::fp32, {kCapacity, kDim / 2}), sin(DType::fp32, {kCapacity, kDim / 2});
  AppendKv a = s.spec(RopeKind::interleaved, kDim);
  a.rope_cos = cos.view();
  a.rope_sin = sin.view();
  expect_error(s.builder(a).peek(), "cannot hold sequence 2's seqlen_k_per_batch[2] = 11");
}

TEST(AppendKvValidation, RopeBaseAndOffsetsAreChecked) {
  AppendSetup s(2);
  HostTensor cos(DType::fp32, {32, kDim / 2}), sin(DType::fp32, {32, kDim / 2});
  AppendKv both = s.spec(RopeKind::interleaved, kDim);
  both.rope_theta = 10000.0;
  both.rope_cos = cos.view();
  both.rope_sin = sin.view();
  expect_error(s.builder(both).peek(), "append.rope_cos is set");
  AppendKv negative = s.spec(RopeKind::interleaved, kDim);
  negative.rope_theta = -1.0;
  expect_error(s.builder(negative).peek(), "append.rope_theta = -1");
  AppendKv without_rope = s.spec(RopeKind::none, 0);
  without_rope.rope_theta = 10000.0;
  expect_error(s.builder(without_rope).peek(), "append.rope_theta = 10000 set but append.rope");
  AppendKv short_offsets = s.spec(RopeKind::interleaved, kDim);
  short_offsets.rope_theta = 10000.0;
  short_offsets.rope_position_offsets = {1, 2};
  expect_error(s.builder(short_offsets).peek(),
               "append.rope_position_offsets has 2 entries but batch = 3");
  AppendKv before_zero = s.spec(RopeKind::interleaved, kDim);
  before_zero.rope_theta = 10000.0;
  before_zero.rope_position_offsets = {0, -1, 0};
  expect_error(s.builder(before_zero).peek(), "append.rope_position_offsets[1] = -1");
  AppendKv offsets_without_rope = s.spec(RopeKind::none, 0);
  offsets_without_rope.rope_position_offsets = {0, 0, 0};
  expect_error(s.builder(offsets_without_rope).peek(), "append.rope = none");
  // Offsets push positions past the tables: the message names the offset.
  AppendKv past_tables = s.spec(RopeKind::interleaved, kDim);
  past_tables.rope_cos = cos.view();
  past_tables.rope_sin = sin.view();
  past_tables.rope_position_offsets = {0, 0, 30};
  expect_error(s.builder(past_tables).peek(), "RoPE position offset 30");
  AppendKv fine = s.spec(RopeKind::half_rotated, kDim);
  fine.rope_theta = 10000.0;
  fine.rope_position_offsets = {3, 0, 100000};
  EXPECT_EQ(validation_error(s.builder(fine).peek()), "");
}

TEST(AppendKvValidation, DeviceKeyLengthsAreAcceptedAndBoundTheCapacity) {
  AppendSetup s(2);
  Problem p = s.builder(s.spec(RopeKind::none, 0)).peek();
  p.seqlen_k_per_batch.clear();
  p.device_indices.seqlen_k = reinterpret_cast<const int64_t*>(uintptr_t{1} << 20);
  p.seqlen_k = 10;  // the longest cached length
  EXPECT_EQ(validation_error(p), "");
  p.seqlen_k = 11;
  expect_error(p, "seqlen_k = 11 (the bound of the device key lengths)");
  Problem none = s.builder(s.spec(RopeKind::none, 0)).peek();
  none.seqlen_k_per_batch.clear();
  expect_error(none, "needs the cache length of every sequence");
}

TEST(AppendKvValidation, DevicePositionOffsetsNeedARopeBase) {
  AppendSetup s(2);
  const auto* offsets = reinterpret_cast<const int64_t*>(uintptr_t{1} << 20);
  HostTensor cos(DType::fp32, {32, kDim / 2}), sin(DType::fp32, {32, kDim / 2});
  AppendKv tables = s.spec(RopeKind::interleaved, kDim);
  tables.rope_cos = cos.view();
  tables.rope_sin = sin.view();
  expect_error(s.builder(tables).rope_offsets_on_device(offsets).peek(),
               "device_indices.rope_position_offsets needs append.rope_theta > 0");
  AppendKv theta = s.spec(RopeKind::interleaved, kDim);
  theta.rope_theta = 10000.0;
  const Problem on_device = s.builder(theta).rope_offsets_on_device(offsets).o(s.o.view()).peek();
  EXPECT_EQ(validation_error(on_device), "");
  // The attention after the append takes no offsets.
  EXPECT_EQ(attention_after_append(on_device).device_indices.rope_position_offsets, nullptr);
  theta.rope_position_offsets = {0, 0, 0};
  expect_error(s.builder(theta).rope_offsets_on_device(offsets).peek(), "are both set");
  // The reference cannot read them.
  EXPECT_THROW(reference::run(on_device), Error);
}

TEST(AppendKvValidation, TheAttentionAfterTheAppendMustBeValid) {
  AppendSetup s(2);
  // O with the wrong head dim: named as the append -> attend problem's O.
  HostTensor narrow(DType::fp32, {kBatch, kNew, kHeadsQ, 8});
  expect_error(s.builder(s.spec(RopeKind::none, 0)).o(narrow.view()).peek(), "o.shape");
  // Attention features reach the attention (bias without its tensor is refused there).
  Problem with_bias = s.builder(s.spec(RopeKind::none, 0)).o(s.o.view()).peek();
  with_bias.bias_kind = BiasKind::elementwise;
  expect_error(with_bias, "bias");
  // Q must exist to attend even without rotate_q.
  Problem no_q = s.builder(s.spec(RopeKind::none, 0)).o(s.o.view()).peek();
  no_q.q = TensorView{};
  expect_error(no_q, "q is missing");
}

}  // namespace
}  // namespace tilefmha
