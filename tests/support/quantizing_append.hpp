// Test support for the quantizing append (tilefmha::quantizes_append): the page scales and new
// values the emulation and GPU tests share.
#pragma once

#include "support/tensor_pool.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::testing {

// New values of a quantizing append's tests span +-kQuantizedRange: their largest magnitude over
// e4m3's 448 (~0.0067) lands inside the held pages' scales below, so about half grow and half
// keep.
inline constexpr double kQuantizedRange = 3.0;

// K's and V's per-page scales [pages, heads], uniform in [0.002, 0.01].
inline Fp8Scales quantizing_page_scales(TensorPool& pool, int64_t pages, int64_t heads) {
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_page;
  scales.k_page = pool.uniform(DType::fp32, {pages, heads}, 0.002, 0.01);
  scales.v_page = pool.uniform(DType::fp32, {pages, heads}, 0.002, 0.01);
  return scales;
}

}  // namespace tilefmha::testing
