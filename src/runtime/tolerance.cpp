#include "runtime/tolerance.hpp"

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"

namespace tilefmha::runtime {

void Agreement::add(const TensorView& gpu, const TensorView& ref, Tolerance tol) {
  for_each_element_pair(gpu, ref, [&](int64_t gpu_offset, int64_t ref_offset) {
    add(numeric::load(gpu.data, gpu.dtype, gpu_offset),
        numeric::load(ref.data, ref.dtype, ref_offset), tol);
  });
}

}  // namespace tilefmha::runtime
