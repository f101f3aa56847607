#include "runtime/tolerance.hpp"

#include <algorithm>
#include <initializer_list>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"

namespace tilefmha::runtime {
namespace {

// The largest |element| of the views, NaN skipped; 0 when they are empty.
double largest_magnitude(std::initializer_list<const TensorView*> views) {
  double largest = 0;
  for (const TensorView* view : views) {
    if (view->empty()) continue;
    for_each_element(*view, [&](int64_t, int64_t offset) {
      const double magnitude = std::fabs(numeric::load(view->data, view->dtype, offset));
      if (magnitude > largest) largest = magnitude;  // false for NaN
    });
  }
  return largest;
}

double largest_v_descale(const Fp8Scales& scales) {
  switch (scales.kind) {
    case Fp8ScaleKind::per_block: return largest_magnitude({&scales.v_block});
    case Fp8ScaleKind::per_page: return largest_magnitude({&scales.v_page});
    default: return std::fabs(scales.v_descale);
  }
}

}  // namespace

double max_abs_dequantized_v(const Problem& problem) {
  return largest_magnitude({&problem.v, &problem.append.v_new}) * largest_v_descale(problem.fp8);
}

Tolerance o_tolerance(const Problem& problem) {
  if (!is_fp8(problem.dtype)) return output_tolerance(problem.out_dtype);
  return fp8_output_tolerance(problem.out_dtype, max_abs_dequantized_v(problem));
}

Tolerance lse_tolerance(const Problem& problem) {
  return is_fp8(problem.dtype) ? kFp8LseTolerance : kLseTolerance;
}

void Agreement::add(const TensorView& gpu, const TensorView& ref, Tolerance tol) {
  for_each_element_pair(gpu, ref, [&](int64_t gpu_offset, int64_t ref_offset) {
    add(numeric::load(gpu.data, gpu.dtype, gpu_offset),
        numeric::load(ref.data, ref.dtype, ref_offset), tol);
  });
}

}  // namespace tilefmha::runtime
