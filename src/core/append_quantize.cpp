// The quantizing append's definitions (quantizes_append, its page scales), shared by
// validation, the CPU reference and the GPU plan.
#include "fmha/appendkv_params.h"
#include "tilefmha/problem.hpp"

namespace tilefmha {

bool quantizes_append(const Problem& problem) {
  return problem.family == Family::fwd_appendkv && is_fp8(problem.dtype) &&
         problem.fp8.kind == Fp8ScaleKind::per_page;
}

float quantized_page_scale(DType dtype, bool held, float old_scale, float new_amax) {
  const float largest =
      dtype == DType::fp8_e5m2 ? fmha::kAppendKvE5m2Largest : fmha::kAppendKvE4m3Largest;
  return fmha::appendkv_page_scale(largest, held, old_scale, new_amax);
}

}  // namespace tilefmha
