// PyTorch tensors read through their own Python attributes (data_ptr(), shape, stride(), dtype,
// get_device()) from C++, for the forward's fast path: one call into the extension reads every
// tensor of a problem, where the general path crosses into it once per tensor and per setter.
// Nothing here links or includes PyTorch: the Python layer registers torch.Tensor and its
// dtype objects once (register_torch), and tensors are recognised by exact type and dtypes by
// identity.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "tilefmha/tensor.hpp"

namespace tilefmha::python {

// `tensor_type` is torch.Tensor; `dtypes` maps dtype objects (torch.float16...) to engine dtype
// names ("fp16"...). Later calls replace the registration. Only the registered dtypes take the
// fast path.
void register_torch(const pybind11::handle& tensor_type, const pybind11::dict& dtypes);

// The device view of `tensor` when it is a plain torch.Tensor (not a subclass) of `rank`
// dimensions and a registered dtype on CUDA device `device`; nullopt otherwise, and then the
// caller takes the general path, whose checks name what is wrong. Errors raised by the
// tensor's own attributes propagate (pybind11::error_already_set).
std::optional<TensorView> torch_view(const pybind11::handle& tensor, int rank, int device);

}  // namespace tilefmha::python
