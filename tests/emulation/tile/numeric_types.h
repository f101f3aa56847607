// Host stand-in for kernels/tile/numeric_types.h (see tests/emulation/README.md): 16-bit and
// fp8 storage types converted by the host's numeric code (round to nearest even; fp8 saturating,
// NaN as 0x7F, which is what the device's cvt.rn.satfinite does).
#pragma once

#include "core/numeric.hpp"
#include "tile/device.h"

namespace tilefmha::tile {

struct half_t {
  u16 bits;
};
struct bfloat16_t {
  u16 bits;
};
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

inline half_t to_half(float value) {
  half_t out;
  numeric::store(&out.bits, DType::fp16, 0, value);
  return out;
}
inline bfloat16_t to_bfloat16(float value) {
  bfloat16_t out;
  numeric::store(&out.bits, DType::bf16, 0, value);
  return out;
}
inline float to_float(half_t value) {
  return static_cast<float>(numeric::load(&value.bits, DType::fp16, 0));
}
inline float to_float(bfloat16_t value) {
  return bits_as_float(u32(value.bits) << 16);
}
inline float to_float(float value) {
  return value;
}
inline float to_float(float_e4m3_t value) {
  return static_cast<float>(numeric::load(&value.bits, DType::fp8_e4m3, 0));
}
inline float to_float(float_e5m2_t value) {
  return static_cast<float>(numeric::load(&value.bits, DType::fp8_e5m2, 0));
}

template <class T>
u32 pack2(float lo, float hi) {
  const T a = same_type<T, half_t>::value ? T{to_half(lo).bits} : T{to_bfloat16(lo).bits};
  const T b = same_type<T, half_t>::value ? T{to_half(hi).bits} : T{to_bfloat16(hi).bits};
  return u32(a.bits) | (u32(b.bits) << 16);
}

template <class T>
void unpack2(u32 packed, float& lo, float& hi) {
  lo = to_float(T{u16(packed & 0xFFFFu)});
  hi = to_float(T{u16(packed >> 16)});
}

template <class T>
T from_float(float value) {
  if constexpr (same_type<T, half_t>::value) {
    return to_half(value);
  } else if constexpr (same_type<T, bfloat16_t>::value) {
    return to_bfloat16(value);
  } else {
    return value;
  }
}

// Two values rounded to T, `lo` in the lower bits of the pair. The value is a float, as on the
// device, so the host's double rounding sees the same input as the GPU's cvt.
template <class T>
u32 pack_pair(float lo, float hi) {
  if constexpr (is_fp8<T>::value) {
    const DType dtype = same_type<T, float_e4m3_t>::value ? DType::fp8_e4m3 : DType::fp8_e5m2;
    unsigned char codes[2];
    numeric::store(codes, dtype, 0, lo);
    numeric::store(codes, dtype, 1, hi);
    return u32(codes[0]) | (u32(codes[1]) << 8);
  } else {
    return pack2<T>(lo, hi);
  }
}

}  // namespace tilefmha::tile
