// The quantizing append's definitions (quantizes_append, its page scales), shared by
// validation, the CPU reference and the GPU plan.
#include "fmha/appendkv_params.h"
#include "tilefmha/problem.hpp"

namespace tilefmha {

bool quantizes_append(const Problem& problem) {
  return problem.family == Family::fwd_appendkv && is_fp8(problem.dtype) &&
         problem.fp8.kind == Fp8ScaleKind::per_page;
}

double fp8_max(DType dtype) {
  return dtype == DType::fp8_e5m2 ? 57344.0 : 448.0;
}

float quantized_page_scale(DType dtype, bool held, float old_scale, float new_amax) {
  return fmha::appendkv_page_scale(static_cast<float>(fp8_max(dtype)), held, old_scale, new_amax);
}

}  // namespace tilefmha
