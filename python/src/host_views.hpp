// NumPy arrays -> host TensorViews over the same memory (no copies), with the strides NumPy
// gives, converted from bytes to elements.
#pragma once

#include <pybind11/numpy.h>

#include <string_view>

#include "tilefmha/tensor.hpp"

namespace tilefmha::python {

// The engine dtype a NumPy dtype stores: float32 -> fp32, float16 -> fp16, uint16 -> bf16 (NumPy
// has no bfloat16, so bf16 travels as its bit patterns), a dtype named "bfloat16" (ml_dtypes)
// -> bf16, "float8_e4m3fn" / "float8_e5m2" (ml_dtypes) -> fp8_e4m3 / fp8_e5m2, int32, int64,
// uint8 (fp8 codes too, read as fp8 where the call says so: ProblemHandle's as_dtype). Throws
// Error(invalid_argument) naming `field` otherwise.
DType storage_dtype(const pybind11::dtype& dtype, std::string_view field);

// A view of `array` (rank <= kMaxRank). Byte strides must be whole elements; negative strides
// pass through for validation to reject by field name. `writable` demands a writeable array
// (outputs, caches updated in place).
TensorView host_view(const pybind11::array& array, std::string_view field, bool writable);

}  // namespace tilefmha::python
