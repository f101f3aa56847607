// Checked mode for device-side index arrays (DeviceIndexArrays::checked): the kernels trust
// device page tables and lengths, so a caller who does not can have them validated like host
// arrays before anything reads them.
#pragma once

#include "jit/cuda_driver.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// The problem with every device index array copied into its host vector (and the device
// pointer cleared), after synchronizing `stream` so that work queued before the call (e.g. a
// kernel writing the new lengths) has landed.
Problem with_host_indices(const Problem& problem, jit::CUstream stream);

// Validates the device index arrays of `problem` as host arrays; throws the validation Error,
// prefixed with "checked device index arrays: ", naming the first bad entry.
void check_device_indices(const Problem& problem, jit::CUstream stream);

}  // namespace tilefmha::runtime
