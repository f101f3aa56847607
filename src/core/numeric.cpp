#include "core/numeric.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace tilefmha::numeric {
namespace {

// A binary float format with `exp_bits` exponent and `man_bits` mantissa bits.
struct MiniFloat {
  int exp_bits;
  int man_bits;
  bool has_inf;  // IEEE-like (fp16, e5m2) vs e4m3 (no inf, only S.1111.111 is NaN)
  double max_finite;
  uint32_t nan_code;  // what a NaN encodes to

  int bias() const { return (1 << (exp_bits - 1)) - 1; }

  double decode(uint32_t bits) const {
    const uint32_t sign = bits >> (exp_bits + man_bits);
    const uint32_t exp = (bits >> man_bits) & ((1u << exp_bits) - 1);
    const uint32_t man = bits & ((1u << man_bits) - 1);
    const uint32_t exp_max = (1u << exp_bits) - 1;
    double value;
    if (has_inf && exp == exp_max) {
      value = man == 0 ? std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::quiet_NaN();
    } else if (!has_inf && exp == exp_max && man == (1u << man_bits) - 1) {
      value = std::numeric_limits<double>::quiet_NaN();
    } else if (exp == 0) {
      value = std::ldexp(static_cast<double>(man), 1 - bias() - man_bits);
    } else {
      value = std::ldexp(static_cast<double>(man + (1u << man_bits)),
                         static_cast<int>(exp) - bias() - man_bits);
    }
    return sign ? -value : value;
  }

  // saturate: overflow clamps to max_finite instead of becoming inf.
  uint32_t encode(double value, bool saturate) const {
    const uint32_t sign_bit = 1u << (exp_bits + man_bits);
    const uint32_t exp_max = (1u << exp_bits) - 1;
    if (std::isnan(value)) return nan_code;
    const uint32_t sign = std::signbit(value) ? sign_bit : 0;
    double a = std::fabs(value);
    if (a == 0) return sign;
    const int min_exp = 1 - bias();
    int exponent = std::ilogb(a);
    if (exponent < min_exp) exponent = min_exp;
    const double quantum = std::ldexp(1.0, exponent - man_bits);
    double rounded = std::nearbyint(a / quantum) * quantum;  // default mode: ties to even
    if (rounded > max_finite || std::isinf(a)) {
      if (saturate || !has_inf)
        rounded = max_finite;
      else
        return sign | (exp_max << man_bits);
    }
    if (rounded == 0) return sign;
    int e = std::ilogb(rounded);
    if (e < min_exp) {  // subnormal
      const auto man = static_cast<uint32_t>(std::ldexp(rounded, -(min_exp - man_bits)));
      return sign | man;
    }
    const auto man = static_cast<uint32_t>(std::ldexp(rounded, man_bits - e)) - (1u << man_bits);
    return sign | (static_cast<uint32_t>(e + bias()) << man_bits) | man;
  }
};

// fp8 NaNs encode as 0x7F, the code sm_89's cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 writes for any
// NaN, so that host and GPU quantization agree byte for byte (the GPU append-KV kernel is
// compared with the reference that way). For e5m2 that is a quiet NaN; the 0x7D written before
// was a signaling one, which no IEEE-like conversion returns.
constexpr MiniFloat kHalf{5, 10, true, 65504.0, 0x7C01};
constexpr MiniFloat kE4M3{4, 3, false, 448.0, 0x7F};
constexpr MiniFloat kE5M2{5, 2, true, 57344.0, 0x7F};

// Element `offset` of type T at `bytes`, through memcpy: callers' views need not be aligned to
// T (a NumPy view may start at any byte), and a cast pointer to misaligned memory is undefined.
template <class T>
T read(const unsigned char* bytes, int64_t offset) {
  T value;
  std::memcpy(&value, bytes + offset * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return value;
}
template <class T>
void write(unsigned char* bytes, int64_t offset, T value) {
  std::memcpy(bytes + offset * static_cast<int64_t>(sizeof(T)), &value, sizeof(T));
}

}  // namespace

float half_to_float(uint16_t bits) {
  return static_cast<float>(kHalf.decode(bits));
}
uint16_t float_to_half(double value) {
  return static_cast<uint16_t>(kHalf.encode(value, false));
}
float fp8_e4m3_to_float(uint8_t bits) {
  return static_cast<float>(kE4M3.decode(bits));
}
uint8_t float_to_fp8_e4m3(double value) {
  return static_cast<uint8_t>(kE4M3.encode(value, true));
}
float fp8_e5m2_to_float(uint8_t bits) {
  return static_cast<float>(kE5M2.decode(bits));
}
uint8_t float_to_fp8_e5m2(double value) {
  return static_cast<uint8_t>(kE5M2.encode(value, true));
}

float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &word, sizeof(out));
  return out;
}

uint16_t float_to_bf16(double value) {
  // Double -> float first is exact enough: bf16 has 8 mantissa bits, float 24, and the
  // double rounding cannot create a tie that was not one (the float keeps 16 extra bits).
  const float f = static_cast<float>(value);
  uint32_t word;
  std::memcpy(&word, &f, sizeof(word));
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t rounding = 0x7fff + ((word >> 16) & 1);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

double round_to(DType dtype, double value) {
  switch (dtype) {
    case DType::fp32: return static_cast<float>(value);
    case DType::fp16: return half_to_float(float_to_half(value));
    case DType::bf16: return bf16_to_float(float_to_bf16(value));
    case DType::fp8_e4m3: return fp8_e4m3_to_float(float_to_fp8_e4m3(value));
    case DType::fp8_e5m2: return fp8_e5m2_to_float(float_to_fp8_e5m2(value));
    case DType::int32: return static_cast<double>(static_cast<int32_t>(value));
    case DType::int64: return static_cast<double>(static_cast<int64_t>(value));
    case DType::uint8: return static_cast<double>(static_cast<uint8_t>(value));
  }
  return value;
}

double load(const void* data, DType dtype, int64_t offset) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  switch (dtype) {
    case DType::fp32: return read<float>(bytes, offset);
    case DType::fp16: return half_to_float(read<uint16_t>(bytes, offset));
    case DType::bf16: return bf16_to_float(read<uint16_t>(bytes, offset));
    case DType::fp8_e4m3: return fp8_e4m3_to_float(read<uint8_t>(bytes, offset));
    case DType::fp8_e5m2: return fp8_e5m2_to_float(read<uint8_t>(bytes, offset));
    case DType::int32: return read<int32_t>(bytes, offset);
    case DType::int64: return static_cast<double>(read<int64_t>(bytes, offset));
    case DType::uint8: return read<uint8_t>(bytes, offset);
  }
  return 0;
}

void store(void* data, DType dtype, int64_t offset, double value) {
  auto* bytes = static_cast<unsigned char*>(data);
  switch (dtype) {
    case DType::fp32: return write(bytes, offset, static_cast<float>(value));
    case DType::fp16: return write(bytes, offset, float_to_half(value));
    case DType::bf16: return write(bytes, offset, float_to_bf16(value));
    case DType::fp8_e4m3: return write(bytes, offset, float_to_fp8_e4m3(value));
    case DType::fp8_e5m2: return write(bytes, offset, float_to_fp8_e5m2(value));
    case DType::int32: return write(bytes, offset, static_cast<int32_t>(value));
    case DType::int64: return write(bytes, offset, static_cast<int64_t>(value));
    case DType::uint8: return write(bytes, offset, static_cast<uint8_t>(value));
  }
}

}  // namespace tilefmha::numeric
