// 16-bit and 8-bit storage types and their conversions. NVRTC 13 ships no cuda_fp16.h /
// cuda_bf16.h, so values are plain bit patterns converted with PTX cvt (round to nearest even).
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

struct half_t {
  u16 bits;
};

struct bfloat16_t {
  u16 bits;
};

// FP8 codes (sm89+ tensor cores): e4m3 (3 mantissa bits, finite range 448) and e5m2.
struct float_e4m3_t {
  unsigned char bits;
};

struct float_e5m2_t {
  unsigned char bits;
};

template <class T>
struct is_fp8 {
  static constexpr bool value =
      same_type<T, float_e4m3_t>::value || same_type<T, float_e5m2_t>::value;
};

// Storage bytes of an element type (sizeof of these tags is their width).
template <class T>
constexpr int element_bytes() {
  return int(sizeof(T));
}

// Two 16-bit values in one 32-bit register, the operand unit of ldmatrix and mma: `lo` sits in
// bits 0..15, i.e. at the lower shared-memory address.
TILEFMHA_DEVICE u32 pack_half2(float lo, float hi) {
  u32 packed;
  // cvt.*x2 puts its first source in the upper half.
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

TILEFMHA_DEVICE u32 pack_bfloat162(float lo, float hi) {
  u32 packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

#if defined(TILEFMHA_HAS_SM90)
// Four values as e4m3 codes in one 32-bit register, `v0` in the lowest byte (the lowest
// shared-memory address), rounded to nearest and saturated to +-448 (NaN stays NaN).
TILEFMHA_DEVICE u32 pack_e4m3x4(float v0, float v1, float v2, float v3) {
  u32 packed;
  // cvt.*x2 puts its first source in the upper byte of each 16-bit pair.
  asm("{\n .reg .b16 lo, hi;\n"
      " cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      " mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(packed)
      : "f"(v0), "f"(v1), "f"(v2), "f"(v3));
  return packed;
}
#endif

TILEFMHA_DEVICE half_t to_half(float value) {
  u16 bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return {bits};
}

TILEFMHA_DEVICE bfloat16_t to_bfloat16(float value) {
  u16 bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return {bits};
}

TILEFMHA_DEVICE float to_float(half_t value) {
  float widened;
  asm("cvt.f32.f16 %0, %1;" : "=f"(widened) : "h"(value.bits));
  return widened;
}

// bf16 is the upper half of an fp32, so widening is exact as a shift.
TILEFMHA_DEVICE float to_float(bfloat16_t value) {
  return bits_as_float(u32(value.bits) << 16);
}

TILEFMHA_DEVICE void unpack_half2(u32 packed, float& lo, float& hi) {
  lo = to_float(half_t{u16(packed & 0xFFFFu)});
  hi = to_float(half_t{u16(packed >> 16)});
}

TILEFMHA_DEVICE void unpack_bfloat162(u32 packed, float& lo, float& hi) {
  lo = bits_as_float(packed << 16);
  hi = bits_as_float(packed & 0xFFFF0000u);
}

// Type-directed forms for kernels templated on the element type.
template <class T>
TILEFMHA_DEVICE u32 pack2(float lo, float hi) {
  static_assert(same_type<T, half_t>::value || same_type<T, bfloat16_t>::value,
                "pack2 takes half_t or bfloat16_t");
  if constexpr (same_type<T, half_t>::value) {
    return pack_half2(lo, hi);
  } else {
    return pack_bfloat162(lo, hi);
  }
}

template <class T>
TILEFMHA_DEVICE void unpack2(u32 packed, float& lo, float& hi) {
  static_assert(same_type<T, half_t>::value || same_type<T, bfloat16_t>::value,
                "unpack2 takes half_t or bfloat16_t");
  if constexpr (same_type<T, half_t>::value) {
    unpack_half2(packed, lo, hi);
  } else {
    unpack_bfloat162(packed, lo, hi);
  }
}

// e5m2 is the upper byte of an fp16, so widening is exact as a shift.
TILEFMHA_DEVICE float to_float(float_e5m2_t value) {
  return to_float(half_t{u16(u16(value.bits) << 8)});
}

#if defined(TILEFMHA_HAS_SM89)
TILEFMHA_DEVICE float to_float(float_e4m3_t value) {
  u32 halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(u16(value.bits)));
  return to_float(half_t{u16(halves & 0xFFFFu)});
}

// Two values as fp8 codes, `lo` in the lower byte: rounded to nearest even, saturated to the
// largest finite value (infinities too), any NaN as 0x7F (numeric::store on the host agrees).
TILEFMHA_DEVICE u16 pack_e4m3x2(float lo, float hi) {
  u16 packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}

TILEFMHA_DEVICE u16 pack_e5m2x2(float lo, float hi) {
  u16 packed;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}
#endif

// Two values rounded to T (fp16, bf16 or fp8) as storage bits, `lo` in the lower bits of the
// pair: one cvt per pair. fp8 saturates (pack_e4m3x2); fp16 and bf16 round as pack2 does.
template <class T>
TILEFMHA_DEVICE u32 pack_pair(float lo, float hi) {
  if constexpr (is_fp8<T>::value) {
#if defined(TILEFMHA_HAS_SM89)
    if constexpr (same_type<T, float_e4m3_t>::value) {
      return pack_e4m3x2(lo, hi);
    } else {
      return pack_e5m2x2(lo, hi);
    }
#else
    static_assert(!is_fp8<T>::value, "fp8 conversions need sm_89 (cvt e4m3x2 / e5m2x2)");
    return 0;
#endif
  } else {
    return pack2<T>(lo, hi);
  }
}

template <class T>
TILEFMHA_DEVICE T from_float(float value) {
  static_assert(
      same_type<T, half_t>::value || same_type<T, bfloat16_t>::value || same_type<T, float>::value,
      "from_float takes half_t, bfloat16_t or float");
  if constexpr (same_type<T, half_t>::value) {
    return to_half(value);
  } else if constexpr (same_type<T, bfloat16_t>::value) {
    return to_bfloat16(value);
  } else {
    return value;
  }
}

TILEFMHA_DEVICE float to_float(float value) {
  return value;
}

}  // namespace tilefmha::tile
