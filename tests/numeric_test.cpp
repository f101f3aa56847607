#include "core/numeric.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/philox.h"

using namespace tilefmha;

TEST(Numeric, HalfKnownValues) {
  EXPECT_EQ(numeric::float_to_half(1.0), 0x3c00);
  EXPECT_EQ(numeric::float_to_half(-2.0), 0xc000);
  EXPECT_EQ(numeric::float_to_half(65504.0), 0x7bff);
  EXPECT_EQ(numeric::float_to_half(1e6), 0x7c00);                         // overflow -> inf
  EXPECT_EQ(numeric::float_to_half(std::ldexp(1.0, -24)), 0x0001);        // smallest subnormal
  EXPECT_EQ(numeric::float_to_half(1.0 + std::ldexp(1.0, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(numeric::float_to_half(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);
  EXPECT_FLOAT_EQ(numeric::half_to_float(0x3555), 0.333251953125f);
}

TEST(Numeric, Bf16KnownValues) {
  EXPECT_EQ(numeric::float_to_bf16(1.0), 0x3f80);
  EXPECT_EQ(numeric::float_to_bf16(-3.0), 0xc040);
  EXPECT_EQ(numeric::float_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3f80);  // tie -> even
  EXPECT_FLOAT_EQ(numeric::bf16_to_float(0x4049), 3.140625f);
}

TEST(Numeric, Fp8KnownValues) {
  EXPECT_EQ(numeric::float_to_fp8_e4m3(1.0), 0x38);
  EXPECT_EQ(numeric::float_to_fp8_e4m3(448.0), 0x7e);
  EXPECT_EQ(numeric::float_to_fp8_e4m3(1000.0), 0x7e);  // saturates
  EXPECT_EQ(numeric::float_to_fp8_e4m3(-std::ldexp(1.0, -9)), 0x81);
  EXPECT_EQ(numeric::float_to_fp8_e5m2(1.0), 0x3c);
  EXPECT_EQ(numeric::float_to_fp8_e5m2(57344.0), 0x7b);
  EXPECT_TRUE(std::isnan(numeric::fp8_e4m3_to_float(0x7f)));
}

// What sm_89's cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 writes (CUDA's cuda_fp8.hpp models it), which
// the GPU append-KV kernel must match byte for byte: ties to even up to the largest finite value,
// everything past it (infinities too) saturates with its sign, every NaN is 0x7F.
TEST(Numeric, Fp8EncodingSaturatesAndCanonicalizesNanLikeTheHardware) {
  const double nan = std::nan("");
  for (const auto encode : {numeric::float_to_fp8_e4m3, numeric::float_to_fp8_e5m2}) {
    EXPECT_EQ(encode(nan), 0x7f);
    EXPECT_EQ(encode(-nan), 0x7f);
    EXPECT_EQ(encode(-0.0), 0x80);
    EXPECT_EQ(encode(-std::ldexp(1.0, -30)), 0x80);  // underflows to -0
  }
  EXPECT_EQ(numeric::float_to_fp8_e4m3(464.0), 0x7e);  // halfway to 480: ties to even (448)
  EXPECT_EQ(numeric::float_to_fp8_e4m3(464.5), 0x7e);  // past it: saturates
  EXPECT_EQ(numeric::float_to_fp8_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(numeric::float_to_fp8_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(numeric::float_to_fp8_e4m3(std::ldexp(1.0, -10)), 0x00);  // half the least: even
  EXPECT_EQ(numeric::float_to_fp8_e4m3(3 * std::ldexp(1.0, -10)), 0x02);
  EXPECT_EQ(numeric::float_to_fp8_e5m2(61440.0), 0x7b);  // halfway to 65536: saturates
  EXPECT_EQ(numeric::float_to_fp8_e5m2(INFINITY), 0x7b);
  EXPECT_EQ(numeric::float_to_fp8_e5m2(-INFINITY), 0xfb);
  EXPECT_EQ(numeric::float_to_fp8_e5m2(std::ldexp(1.0, -17)), 0x00);
  EXPECT_EQ(numeric::float_to_fp8_e5m2(3 * std::ldexp(1.0, -17)), 0x02);
}

TEST(Numeric, EveryEncodingRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float h = numeric::half_to_float(static_cast<uint16_t>(bits));
    if (!std::isnan(h)) {
      ASSERT_EQ(numeric::float_to_half(h), bits) << bits;
    }
    const float b = numeric::bf16_to_float(static_cast<uint16_t>(bits));
    if (!std::isnan(b)) {
      ASSERT_EQ(numeric::float_to_bf16(b), bits) << bits;
    }
  }
  for (uint32_t bits = 0; bits < 0x100; ++bits) {
    const float e4 = numeric::fp8_e4m3_to_float(static_cast<uint8_t>(bits));
    if (!std::isnan(e4)) {
      ASSERT_EQ(numeric::float_to_fp8_e4m3(e4), bits) << bits;
    }
    const float e5 = numeric::fp8_e5m2_to_float(static_cast<uint8_t>(bits));
    if (!std::isnan(e5) && !std::isinf(e5)) {
      ASSERT_EQ(numeric::float_to_fp8_e5m2(e5), bits);
    }
  }
}

// Known-answer vectors of Philox4x32-10 published with Random123.
TEST(Philox, KnownAnswers) {
  using philox::Word4;
  Word4 zero = philox::philox4x32_10({0, 0, 0, 0}, 0, 0);
  EXPECT_EQ(zero.x, 0x6627e8d5u);
  EXPECT_EQ(zero.y, 0xe169c58du);
  EXPECT_EQ(zero.z, 0xbc57ac4cu);
  EXPECT_EQ(zero.w, 0x9b00dbd8u);
  Word4 ones = philox::philox4x32_10({~0u, ~0u, ~0u, ~0u}, ~0u, ~0u);
  EXPECT_EQ(ones.x, 0x408f276du);
  EXPECT_EQ(ones.y, 0x41c83b0eu);
  EXPECT_EQ(ones.z, 0xa20bc7c6u);
  EXPECT_EQ(ones.w, 0x6d5451fdu);
  Word4 pi = philox::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                   0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.x, 0xd16cfe09u);
  EXPECT_EQ(pi.y, 0x94fdccebu);
  EXPECT_EQ(pi.z, 0x5001e420u);
  EXPECT_EQ(pi.w, 0x24126ea1u);
}

TEST(Numeric, MisalignedElementsLoadAndStoreThroughBytes) {
  // A view may start at any byte (NumPy offsets); loads and stores must not assume alignment.
  alignas(8) unsigned char bytes[1 + 8 * sizeof(int64_t)] = {};
  void* odd = bytes + 1;
  for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16, DType::int32, DType::int64}) {
    tilefmha::numeric::store(odd, dtype, 3, -1.5);
    EXPECT_EQ(tilefmha::numeric::load(odd, dtype, 3),
              dtype == DType::int32 || dtype == DType::int64 ? -1.0 : -1.5)
        << tilefmha::to_string(dtype);
  }
  const float expected = 0.1f;
  std::memcpy(bytes + 1 + 2 * sizeof(float), &expected, sizeof(float));
  EXPECT_EQ(tilefmha::numeric::load(odd, DType::fp32, 2), static_cast<double>(expected));
}
