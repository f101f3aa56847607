// Agreement of GPU results with the reference (runtime/tolerance.hpp): the per-element bound,
// NaN and infinities, and whole views compared through their own strides.
#include "runtime/tolerance.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

}  // namespace
}  // namespace tilefmha::runtime
