// Host shim of kernels/tile/numeric_types.h: the same 16-bit types and round-to-nearest-even
// conversions, in software.
#pragma once

#include <cmath>

#include "tile/device.h"

namespace tilefmha::tile {

struct half_t {
  u16 bits;
};

struct bfloat16_t {
  u16 bits;
};

inline half_t to_half(float value) {
  const u32 f = float_as_bits(value);
  const u32 sign = (f >> 16) & 0x8000u;
  const u32 exponent = (f >> 23) & 0xFFu;
  u32 mantissa = f & 0x7FFFFFu;
  if (exponent == 0xFF) return {u16(sign | 0x7C00u | (mantissa ? 0x200u : 0u))};
  const int e = int(exponent) - 127 + 15;
  if (e >= 31) return {u16(sign | 0x7C00u)};
  if (e <= 0) {
    if (e < -10) return {u16(sign)};
    mantissa |= 0x800000u;
    const int shift = 14 - e;
    u32 half = mantissa >> shift;
    const u32 rest = mantissa & ((1u << shift) - 1);
    const u32 midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return {u16(sign | half)};
  }
  u32 half = (u32(e) << 10) | (mantissa >> 13);
  const u32 rest = mantissa & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent
  return {u16(sign | half)};
}

inline float to_float(half_t value) {
  const u32 sign = u32(value.bits & 0x8000u) << 16;
  const u32 exponent = (value.bits >> 10) & 0x1Fu;
  const u32 mantissa = value.bits & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_as_float(sign | 0x7F800000u | (mantissa << 13));
  return bits_as_float(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

inline bfloat16_t to_bfloat16(float value) {
  const u32 f = float_as_bits(value);
  if (std::isnan(value)) return {u16((f >> 16) | 0x40u)};
  const u32 rounded = f + 0x7FFFu + ((f >> 16) & 1u);
  return {u16(rounded >> 16)};
}

inline float to_float(bfloat16_t value) {
  return bits_as_float(u32(value.bits) << 16);
}

inline float to_float(float value) {
  return value;
}

inline u32 pack_half2(float lo, float hi) {
  return u32(to_half(lo).bits) | (u32(to_half(hi).bits) << 16);
}

inline u32 pack_bfloat162(float lo, float hi) {
  return u32(to_bfloat16(lo).bits) | (u32(to_bfloat16(hi).bits) << 16);
}

inline void unpack_half2(u32 packed, float& lo, float& hi) {
  lo = to_float(half_t{u16(packed & 0xFFFFu)});
  hi = to_float(half_t{u16(packed >> 16)});
}

inline void unpack_bfloat162(u32 packed, float& lo, float& hi) {
  lo = bits_as_float(packed << 16);
  hi = bits_as_float(packed & 0xFFFF0000u);
}

template <class T>
inline u32 pack2(float lo, float hi) {
  if constexpr (same_type<T, half_t>::value) {
    return pack_half2(lo, hi);
  } else {
    return pack_bfloat162(lo, hi);
  }
}

template <class T>
inline void unpack2(u32 packed, float& lo, float& hi) {
  if constexpr (same_type<T, half_t>::value) {
    unpack_half2(packed, lo, hi);
  } else {
    unpack_bfloat162(packed, lo, hi);
  }
}

template <class T>
inline T from_float(float value) {
  if constexpr (same_type<T, half_t>::value) {
    return to_half(value);
  } else if constexpr (same_type<T, bfloat16_t>::value) {
    return to_bfloat16(value);
  } else {
    return value;
  }
}

}  // namespace tilefmha::tile
