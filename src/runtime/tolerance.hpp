// Agreement between a GPU result and the CPU reference: |gpu - ref| <= atol + rtol * |ref| per
// element, where an infinity agrees only with the same infinity, with tolerances per output
// dtype (the documented contract of `run --validate`, of `bench --verify` and of the GPU tests).
// 16-bit outputs are dominated by the final rounding (bf16 keeps 8 bits, fp16 11) plus fp32
// accumulation-order differences; LSE is fp32 computed from fp32 partial sums.
#pragma once

#include <cmath>
#include <cstdint>

#include "tilefmha/tensor.hpp"
#include "tilefmha/types.hpp"

namespace tilefmha::runtime {

struct Tolerance {
  double atol;
  double rtol;
};

inline Tolerance output_tolerance(DType out_dtype) {
  switch (out_dtype) {
    case DType::bf16: return {1.6e-2, 1.6e-2};
    case DType::fp16: return {2e-3, 2e-3};
    default: return {2e-5, 2e-5};
  }
}

inline constexpr Tolerance kLseTolerance{1e-3, 1e-4};

// Backward gradients (dQ, dK, dV) sum many products whose factors P and dS are rounded to 16 bits
// before the tensor-core matmuls, so their error scales with the gradient's largest magnitude
// rather than with each element's: atol is rtol times the largest reference magnitude.
inline Tolerance gradient_tolerance(DType out_dtype, double largest_reference) {
  const double rtol = out_dtype == DType::bf16 ? 3e-2 : out_dtype == DType::fp16 ? 1e-2 : 1e-4;
  return {rtol * largest_reference + 1e-3, rtol};
}

struct Agreement {
  double max_abs_error = 0;
  double max_rel_error = 0;  // |gpu - ref| / max(|ref|, atol)
  int64_t mismatches = 0;    // elements outside the tolerance (NaN counts)
  int64_t compared = 0;

  void add(double gpu, double ref, Tolerance tol) {
    ++compared;
    const double error = std::fabs(gpu - ref);
    if (std::isinf(ref) || std::isinf(gpu)) {
      // LSE is -inf for a row that sees no key. The relative bound is infinite against an
      // infinite reference, so it would accept any value there.
      if (gpu == ref) return;
      ++mismatches;
    } else if (!(error <= tol.atol + tol.rtol * std::fabs(ref))) {
      ++mismatches;  // NaN fails too
    }
    if (std::isnan(error)) return;
    max_abs_error = std::max(max_abs_error, error);
    max_rel_error = std::max(max_rel_error, error / std::max(std::fabs(ref), tol.atol));
  }

  // Every logical element of two views of the same shape (their strides may differ); throws
  // Error(invalid_argument) when the shapes differ.
  void add(const TensorView& gpu, const TensorView& ref, Tolerance tol);
};

}  // namespace tilefmha::runtime
