// Host-side conversions between the storage dtypes and double, round-to-nearest-even.
#pragma once

#include <cstdint>

#include "tilefmha/tensor.hpp"

namespace tilefmha::numeric {

float half_to_float(uint16_t bits);
uint16_t float_to_half(double value);  // overflow -> inf
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(double value);  // overflow -> inf
float fp8_e4m3_to_float(uint8_t bits);
// fp8 encoders round to nearest even and saturate like sm_89's cvt.rn.satfinite: values past
// the largest finite one (infinities too) become it, any NaN becomes 0x7F.
uint8_t float_to_fp8_e4m3(double value);  // saturates to +-448 (no inf in e4m3)
float fp8_e5m2_to_float(uint8_t bits);
uint8_t float_to_fp8_e5m2(double value);  // saturates to +-57344

// The value `value` becomes after a round trip through `dtype` (fp32 rounds to float).
double round_to(DType dtype, double value);

// Element `offset` (in elements) of memory `data` of `dtype`, as double / stored from double.
double load(const void* data, DType dtype, int64_t offset);
void store(void* data, DType dtype, int64_t offset, double value);

// Convenience over views: view.offset(index) then load/store.
inline double load(const TensorView& view, std::initializer_list<int64_t> index) {
  return load(view.data, view.dtype, view.offset(index));
}
inline void store(const TensorView& view, std::initializer_list<int64_t> index, double value) {
  store(view.data, view.dtype, view.offset(index), value);
}

}  // namespace tilefmha::numeric
