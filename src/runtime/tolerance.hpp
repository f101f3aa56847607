// Agreement between a GPU result and the CPU reference: |gpu - ref| <= atol + rtol * |ref| per
// element, where an infinity agrees only with the same infinity, with tolerances per output
// dtype (the documented contract of `run --validate`, of `bench --verify` and of the GPU tests).
// 16-bit outputs are dominated by the final rounding (bf16 keeps 8 bits, fp16 11) plus fp32
// accumulation-order differences; LSE is fp32 computed from fp32 partial sums. FP8 inputs add
// the kernel's own roundings (fp8_output_tolerance, kFp8LseTolerance).
#pragma once

#include <cmath>
#include <cstdint>

#include "tilefmha/problem.hpp"
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

// O of fp8 (e4m3/e5m2) Q, K, V. The sm90_ws kernel rounds each softmax probability p_j (in
// [0, 1] before normalization) to e4m3 before P V, a relative error of at most 2^-4 (3 mantissa
// bits, round to nearest), where the reference keeps p_j exact. O = sum_j p_j v_j / l, so that
// moves O by at most 2^-4 * sum_j p_j |v_j| / l <= 2^-4 * max |v|: atol gets 2^-4 times the
// largest |dequantized V| on top of the output dtype's own tolerance (bf16 O: the rounding term
// of 16-bit outputs). The bound is exact for probabilities at or above e4m3's smallest normal,
// 2^-6; smaller ones round with an absolute error of at most 2^-10 instead, and since those
// errors take either sign, their sum stays inside the bound unless thousands of keys sit there.
// A key in the wrong place or a descale applied to the wrong block moves O by about |V|, far
// past the bound.
inline Tolerance fp8_output_tolerance(DType out_dtype, double max_abs_dequantized_v) {
  const Tolerance rounding = output_tolerance(out_dtype);
  return {std::ldexp(max_abs_dequantized_v, -4) + rounding.atol, rounding.rtol};
}

// LSE of fp8 inputs. No P rounding enters it, but Hopper's fp8 tensor cores add Q K^T products
// into an accumulator of about 14 significant bits (fp32 keeps 24), so the scores, and LSE with
// them, carry a relative error of about 2^-10: rtol is twice that. The scores' errors scale with
// the products' magnitudes rather than with LSE, so an LSE near 0 keeps an absolute 2e-3.
inline constexpr Tolerance kFp8LseTolerance{2e-3, 0x1p-9};

// A bound on the largest |V| after dequantization: the largest |code| of V (and of append-KV's
// new V rows) times the largest V descale (per tensor, per block or per page). NaN codes and
// descales are skipped: stale page-pool slots may hold NaN that no key reads, and a NaN that
// a key does read makes its rows NaN, which fail the comparison anyway.
double max_abs_dequantized_v(const Problem& problem);

// The tolerances a GPU result of `problem` is held to: fp8_output_tolerance and
// kFp8LseTolerance when its inputs are fp8, else output_tolerance(out_dtype) and kLseTolerance.
Tolerance o_tolerance(const Problem& problem);
Tolerance lse_tolerance(const Problem& problem);

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
