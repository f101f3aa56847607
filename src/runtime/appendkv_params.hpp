// Problem -> AppendKvParams of the append-KV kernel (kernels/fmha/appendkv.h). The problem's
// tensors must be device views; its index arrays come as device pointers (the caller's, or the
// plan workspace's uploads).
#pragma once

#include <cstdint>

#include "fmha/appendkv_params.h"
#include "runtime/fwd_params.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Throws Error(invalid_problem / not_supported / invalid_argument) naming the field when a view
// is not in device memory, a head dim is not contiguous, a view is not aligned to its elements
// or an index array has no device copy. `key_lengths_after`: null, or where the kernel writes the
// key counts after the append (plan workspace, batch int64).
fmha::AppendKvParams make_appendkv_params(const Problem& problem, const FwdDeviceIndices& indices,
                                          int64_t* key_lengths_after);

}  // namespace tilefmha::runtime
