// tilefmha::Error -> Python exceptions, by kind, carrying the engine's message unchanged.
#pragma once

#include <pybind11/pybind11.h>

namespace tilefmha::python {

// invalid_problem, invalid_argument -> ValueError; not_supported -> NotImplementedError;
// every other kind (no_kernel, compile, io, runtime) -> RuntimeError.
void register_error_translation();

}  // namespace tilefmha::python
