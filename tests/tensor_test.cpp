#include "tilefmha/tensor.hpp"

#include <gtest/gtest.h>

#include "tilefmha/error.hpp"
#include "tilefmha/types.hpp"

using namespace tilefmha;

TEST(TensorView, BshdAndBhsdAddressTheSameLogicalElementDifferently) {
  const TensorView a = bshd(nullptr, DType::bf16, 2, 5, 3, 8);
  const TensorView b = bhsd(nullptr, DType::bf16, 2, 5, 3, 8);
  // Logical index (batch 1, seq 4, head 2, dim 7).
  EXPECT_EQ(a.offset({1, 4, 2, 7}), ((1 * 5 + 4) * 3 + 2) * 8 + 7);
  EXPECT_EQ(b.offset({1, 4, 2, 7}), ((1 * 3 + 2) * 5 + 4) * 8 + 7);
  EXPECT_EQ(a.extent(), 2 * 5 * 3 * 8);
  EXPECT_EQ(b.extent(), 2 * 5 * 3 * 8);
}

TEST(TensorView, OffsetsAre64Bit) {
  // 2^33 elements along one dim would overflow 32-bit arithmetic.
  const TensorView big = contiguous_view(nullptr, DType::fp16, {4, int64_t{1} << 31, 1, 128});
  EXPECT_EQ(big.offset({3, (int64_t{1} << 31) - 1, 0, 127}),
            3 * (int64_t{1} << 31) * 128 + ((int64_t{1} << 31) - 1) * 128 + 127);
}

TEST(TensorView, RankMismatchIsAnError) {
  const TensorView v = contiguous_view(nullptr, DType::fp32, {2, 3});
  EXPECT_THROW(v.offset({1, 1, 1}), Error);
}

TEST(Types, EnumNamesParseBack) {
  for (size_t i = 0; i < enum_count<Family>(); ++i) {
    const auto family = static_cast<Family>(i);
    EXPECT_EQ(parse_enum<Family>(to_string(family)), family);
  }
  try {
    parse_enum<DType>("fp12");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp12"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos);
  }
}

TEST(TensorView, SizesOverflowingInt64AreErrorsNotWrapped) {
  // 2^40 * 2^40 elements: the row-major strides would wrap (undefined behaviour before).
  EXPECT_THROW(contiguous_view(nullptr, DType::fp32, {int64_t{1} << 40, int64_t{1} << 40}), Error);
  TensorView view = contiguous_view(nullptr, DType::fp32, {2, 3});
  view.shape = {int64_t{1} << 40, int64_t{1} << 40, 0, 0, 0};
  EXPECT_THROW(view.numel(), Error);
  view.stride = {int64_t{1} << 40, 1, 0, 0, 0};
  EXPECT_THROW(view.extent(), Error);
  EXPECT_FALSE(extent_bytes(view).has_value());
  // Just inside: 2^61 fp32 elements are 2^63 bytes, one past int64; 2^60 elements fit.
  const TensorView fits = contiguous_view(nullptr, DType::fp32, {int64_t{1} << 60});
  EXPECT_EQ(extent_bytes(fits), int64_t{1} << 62);
  const TensorView past = contiguous_view(nullptr, DType::fp32, {int64_t{1} << 61});
  EXPECT_EQ(past.extent(), int64_t{1} << 61);
  EXPECT_FALSE(extent_bytes(past).has_value());
}
