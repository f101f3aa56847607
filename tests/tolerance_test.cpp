// Agreement of GPU results with the reference (runtime/tolerance.hpp): the per-element bound,
// NaN and infinities, whole views compared through their own strides, and the fp8 tolerances
// (P rounded to e4m3 against the bound they rest on).
#include "runtime/tolerance.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "support/tensor_pool.hpp"

namespace tilefmha::runtime {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr Tolerance kTol{1e-3, 1e-2};

int64_t mismatches_of(double gpu, double ref) {
  Agreement agreement;
  agreement.add(gpu, ref, kTol);
  return agreement.mismatches;
}

TEST(Tolerance, BoundIsAbsolutePlusRelative) {
  EXPECT_EQ(mismatches_of(1.0 + 0.0109, 1.0), 0);  // within 1e-3 + 1e-2 * 1
  EXPECT_EQ(mismatches_of(1.0 + 0.0112, 1.0), 1);
  EXPECT_EQ(mismatches_of(kNaN, 1.0), 1);
  EXPECT_EQ(mismatches_of(1.0, kNaN), 1);
}

TEST(Tolerance, AnInfinityAgreesOnlyWithTheSameInfinity) {
  EXPECT_EQ(mismatches_of(-kInf, -kInf), 0);  // LSE of a row that sees no key
  EXPECT_EQ(mismatches_of(kInf, kInf), 0);
  EXPECT_EQ(mismatches_of(-3.0, -kInf), 1);  // the relative bound would be infinite here
  EXPECT_EQ(mismatches_of(-kInf, -3.0), 1);
  EXPECT_EQ(mismatches_of(kInf, -kInf), 1);
}

TEST(Tolerance, MaxErrorsSkipAgreeingInfinitiesAndNaN) {
  Agreement agreement;
  agreement.add(-kInf, -kInf, kTol);
  agreement.add(kNaN, 2.0, kTol);
  agreement.add(2.5, 2.0, kTol);
  EXPECT_EQ(agreement.compared, 3);
  EXPECT_EQ(agreement.mismatches, 2);
  EXPECT_DOUBLE_EQ(agreement.max_abs_error, 0.5);
  EXPECT_DOUBLE_EQ(agreement.max_rel_error, 0.25);
}

TEST(Tolerance, ViewsAreComparedElementByElementThroughTheirStrides) {
  // Logical [2, 2]: ref packed, gpu with rows 3 apart (padding holds a value that must not be
  // read) and one element off by 1.
  float ref[4] = {1, 2, 3, 4};
  float gpu[6] = {1, 2, 99, 3, 5, 99};
  TensorView ref_view = contiguous_view(ref, DType::fp32, {2, 2});
  TensorView gpu_view = ref_view;
  gpu_view.data = gpu;
  gpu_view.stride[0] = 3;
  Agreement agreement;
  agreement.add(gpu_view, ref_view, kTol);
  EXPECT_EQ(agreement.compared, 4);
  EXPECT_EQ(agreement.mismatches, 1);
  EXPECT_DOUBLE_EQ(agreement.max_abs_error, 1.0);
}

TEST(Tolerance, SixteenBitTolerancesAreUnchanged) {
  EXPECT_DOUBLE_EQ(output_tolerance(DType::bf16).atol, 1.6e-2);
  EXPECT_DOUBLE_EQ(output_tolerance(DType::bf16).rtol, 1.6e-2);
  EXPECT_DOUBLE_EQ(output_tolerance(DType::fp16).atol, 2e-3);
  EXPECT_DOUBLE_EQ(output_tolerance(DType::fp32).atol, 2e-5);
  EXPECT_DOUBLE_EQ(kLseTolerance.atol, 1e-3);
  EXPECT_DOUBLE_EQ(kLseTolerance.rtol, 1e-4);

  testing::TensorPool pool(1);
  Problem p;
  p.dtype = p.out_dtype = DType::bf16;
  p.v = pool.uniform(DType::bf16, {1, 8, 1, 4}, -100, 100);  // V plays no part in 16-bit bounds
  EXPECT_DOUBLE_EQ(o_tolerance(p).atol, 1.6e-2);
  EXPECT_DOUBLE_EQ(o_tolerance(p).rtol, 1.6e-2);
  EXPECT_DOUBLE_EQ(lse_tolerance(p).atol, kLseTolerance.atol);
  EXPECT_DOUBLE_EQ(lse_tolerance(p).rtol, kLseTolerance.rtol);
}

TEST(Tolerance, Fp8OutputAddsTheProbabilityRoundingToTheOutputDtypes) {
  const Tolerance bf16 = fp8_output_tolerance(DType::bf16, 1.5);
  EXPECT_DOUBLE_EQ(bf16.atol, 1.5 / 16 + 1.6e-2);
  EXPECT_DOUBLE_EQ(bf16.rtol, 1.6e-2);
  const Tolerance fp32 = fp8_output_tolerance(DType::fp32, 2.0);
  EXPECT_DOUBLE_EQ(fp32.atol, 2.0 / 16 + 2e-5);
  EXPECT_DOUBLE_EQ(fp32.rtol, 2e-5);
  EXPECT_DOUBLE_EQ(kFp8LseTolerance.atol, 2e-3);
  EXPECT_DOUBLE_EQ(kFp8LseTolerance.rtol, std::ldexp(1.0, -9));
}

// An fp8 problem's V: e4m3 codes whose largest magnitude is 64, one NaN (a stale pool slot).
Problem fp8_problem(testing::TensorPool& pool) {
  Problem p;
  p.dtype = DType::fp8_e4m3;
  p.out_dtype = DType::bf16;
  p.v = pool.uniform(DType::fp8_e4m3, {2, 5, 2, 8}, -60, 60);
  numeric::store(p.v, {1, 3, 0, 2}, -64.0);
  numeric::store(p.v, {0, 4, 1, 7}, NAN);
  return p;
}

TEST(Tolerance, LargestDequantizedVIsTheLargestCodeTimesTheLargestDescale) {
  testing::TensorPool pool(2);
  Problem p = fp8_problem(pool);
  p.fp8.kind = Fp8ScaleKind::per_tensor;
  p.fp8.v_descale = 1.0 / 32;
  EXPECT_DOUBLE_EQ(max_abs_dequantized_v(p), 2.0);
  EXPECT_DOUBLE_EQ(o_tolerance(p).atol, fp8_output_tolerance(DType::bf16, 2.0).atol);
  EXPECT_DOUBLE_EQ(lse_tolerance(p).rtol, kFp8LseTolerance.rtol);

  p.fp8.kind = Fp8ScaleKind::per_block;
  p.fp8.v_block = pool.filled(DType::fp32, {2, 2, 1}, 1.0 / 64);
  numeric::store(p.fp8.v_block, {1, 0, 0}, 1.0 / 16);
  numeric::store(p.fp8.v_block, {0, 1, 0}, NAN);  // its rows fail on their own NaN
  EXPECT_DOUBLE_EQ(max_abs_dequantized_v(p), 4.0);

  p.fp8.kind = Fp8ScaleKind::per_page;
  p.fp8.v_page = pool.filled(DType::fp32, {10, 2}, 1.0 / 128);
  EXPECT_DOUBLE_EQ(max_abs_dequantized_v(p), 0.5);

  // Append-KV's new V rows are part of V.
  p.append.v_new = pool.filled(DType::fp8_e4m3, {2, 1, 2, 8}, 256.0);
  EXPECT_DOUBLE_EQ(max_abs_dequantized_v(p), 2.0);
}

// One softmax row as the kernel computes it: the numerator sums P rounded to e4m3 times V, the
// denominator l sums the fp32 P (fwd_sm90_softmax.h), while the reference keeps P exact.
struct RowOutputs {
  double exact = 0;
  double rounded = 0;
};

RowOutputs attend(const std::vector<double>& logits, const std::vector<double>& v) {
  double top = -INFINITY;
  for (double s : logits) top = std::max(top, s);
  double l = 0, exact = 0, rounded = 0;
  for (size_t j = 0; j < logits.size(); ++j) {
    const double p = std::exp(logits[j] - top);
    l += p;
    exact += p * v[j];
    rounded += numeric::round_to(DType::fp8_e4m3, p) * v[j];
  }
  return {exact / l, rounded / l};
}

TEST(Tolerance, Fp8BoundCoversRoundingPToE4m3) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> logit(-3.0, 3.0), value(-1.5, 1.5);
  for (int row = 0; row < 200; ++row) {
    std::vector<double> logits(300), v(300);
    double largest_v = 0;
    for (size_t j = 0; j < logits.size(); ++j) {
      logits[j] = logit(rng);
      v[j] = value(rng);
      largest_v = std::max(largest_v, std::fabs(v[j]));
    }
    const RowOutputs o = attend(logits, v);
    EXPECT_LE(std::fabs(o.rounded - o.exact), std::ldexp(largest_v, -4)) << "row " << row;
  }
}

TEST(Tolerance, Fp8BoundIsNeededWhereEveryProbabilityRoundsTheSameWay) {
  // One key at p = 1 and 1000 at p = 0.53, which e4m3 rounds down to 0.5 (relative error close
  // to 2^-4); with every V = 1 the exact O is 1 and the kernel's about 0.944.
  std::vector<double> logits(1001, std::log(0.53)), v(1001, 1.0);
  logits[0] = 0;
  const RowOutputs o = attend(logits, v);
  ASSERT_DOUBLE_EQ(o.exact, 1.0);
  Agreement bf16, fp8;
  bf16.add(o.rounded, o.exact, output_tolerance(DType::bf16));
  fp8.add(o.rounded, o.exact, fp8_output_tolerance(DType::bf16, 1.0));
  EXPECT_EQ(bf16.mismatches, 1) << "error " << o.exact - o.rounded;
  EXPECT_EQ(fp8.mismatches, 0) << "error " << o.exact - o.rounded;
}

}  // namespace
}  // namespace tilefmha::runtime
