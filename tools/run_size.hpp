// The memory a `tilefmha run` is about to allocate, checked before any allocation: a size that
// overflows int64 or exceeds the machine's memory is refused with the tensor it would be for,
// instead of surfacing as std::bad_alloc or "vector larger than max_size" (or an OOM kill).
#pragma once

#include "run_spec.hpp"

namespace tilefmha::cli {

// Throws Error(invalid_argument) "problem too large: N bytes for q (...)" when one of the run's
// large tensors (q, k, v, o, bias, split partials, backward gradients) does not fit int64 or
// the machine's physical memory, or when together they exceed that memory.
void check_run_size(const RunSpec& spec);

}  // namespace tilefmha::cli
