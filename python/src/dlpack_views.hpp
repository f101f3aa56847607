// DLPack capsules (the `__dlpack__` protocol of PyTorch, CuPy, JAX...) -> device TensorViews over
// the producer's memory, no copies, strides as the producer gives them.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "tilefmha/tensor.hpp"

namespace tilefmha::python {

struct DeviceTensor {
  TensorView view;
  int device_ordinal = 0;
};

// Reads a "dltensor" or "dltensor_versioned" capsule without consuming it: the producer's
// capsule destructor still releases the tensor, so the caller keeps the capsule alive while the
// view is in use. Only CUDA (and CUDA managed) memory is accepted; dtypes fp32, fp16, bf16,
// fp8 e4m3fn and e5m2, int32, int64, uint8. A versioned tensor flagged read-only is refused when
// `writable`. Throws Error(invalid_argument) naming `field`.
DeviceTensor device_view(const pybind11::capsule& capsule, std::string_view field, bool writable);

// The same view from a tensor's own description (PyTorch's data_ptr, dtype name without
// "torch.", sizes, element strides, CUDA device index): the fast path for PyTorch tensors, whose
// `__dlpack__` costs tens of microseconds per call in stream and device queries. Throws
// Error(invalid_argument) naming `field`.
DeviceTensor device_view(uintptr_t data, std::string_view dtype, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& strides, int device, std::string_view field);

}  // namespace tilefmha::python
