// Test support: stored codes of a kernel's output against the reference's, byte for byte, for
// outputs that must match exactly (copies, fp8 caches) rather than within a tolerance.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "tilefmha/tensor.hpp"

namespace tilefmha::testing {

struct CodeAgreement {
  int64_t compared = 0;
  int64_t loose = 0;     // elements allowed one step (see compare_codes)
  int64_t one_step = 0;  // loose elements whose codes are adjacent values
  int64_t mismatches = 0;
};

// The element's stored bits (1, 2 or 4 bytes) as an integer ordered like the values it encodes
// (sign and magnitude, so adjacent finite values differ by 1 and +0 / -0 both map to 0).
inline int64_t ordinal(const TensorView& view, int64_t offset) {
  const int64_t bytes = dtype_size(view.dtype);
  uint32_t bits = 0;
  std::memcpy(&bits, static_cast<const unsigned char*>(view.data) + offset * bytes, bytes);
  const uint32_t sign = 1u << (8 * bytes - 1);
  const int64_t magnitude = bits & (sign - 1);
  return bits & sign ? -magnitude : magnitude;
}

inline bool same_bits(const TensorView& a, int64_t offset_a, const TensorView& b,
                      int64_t offset_b) {
  const int64_t bytes = dtype_size(a.dtype);
  return std::memcmp(static_cast<const unsigned char*>(a.data) + offset_a * bytes,
                     static_cast<const unsigned char*>(b.data) + offset_b * bytes, bytes) == 0;
}

// Compares `got` with `want` (one dtype, one shape) code by code in row-major order. Elements for
// which `loose(linear)` holds may also be one code apart: the two roundings of a value that lies
// within the kernel's fp32 error of a rounding midpoint (the reference rotates in double). Both
// codes must then be finite, so a NaN or an infinity never passes as a step.
inline CodeAgreement compare_codes(const TensorView& got, const TensorView& want,
                                   const std::function<bool(int64_t linear)>& loose) {
  CodeAgreement agreement;
  for_each_element_pair(got, want, [&](int64_t got_offset, int64_t want_offset) {
    const int64_t linear = agreement.compared++;
    const bool may_step = loose && loose(linear);
    agreement.loose += may_step;
    if (same_bits(got, got_offset, want, want_offset)) return;
    const double a = numeric::load(got.data, got.dtype, got_offset);
    const double b = numeric::load(want.data, want.dtype, want_offset);
    const bool adjacent = std::isfinite(a) && std::isfinite(b) &&
                          std::llabs(ordinal(got, got_offset) - ordinal(want, want_offset)) <= 1;
    if (may_step && adjacent)
      ++agreement.one_step;
    else
      ++agreement.mismatches;
  });
  return agreement;
}

}  // namespace tilefmha::testing
