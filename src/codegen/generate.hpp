// Codegen: a KernelConfig becomes one small CUDA translation unit (DESIGN §1): the kernel
// family's device header, a traits alias spelled from the config's fields, and one
// extern "C" __global__ entry named config.symbol() that takes the family's parameter struct by
// value. The source needs only the embedded kernels/ headers, so NVRTC compiles it anywhere.
#pragma once

#include <string>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) that no kernel template
// implements, e.g. "pipeline = combine for family fwd_splitkv_combine: codegen implements ...".
void check_supported(const KernelConfig& config);

// The translation unit of `config`; checks support first.
std::string generate_source(const KernelConfig& config);

// The kernel's threads per block (its __launch_bounds__).
int threads_per_block(const KernelConfig& config);

// Grid, block and dynamic shared memory of `config` launched on `problem`. The shared-memory
// size comes from the same formula the kernel uses (kernels/fmha/fwd_shape.h); above 48 KiB the
// launcher raises the function's limit. Throws Error(not_supported) when the grid exceeds the
// hardware limits (65535 heads or sequences). `sm_count` (0: unknown) lets a kernel whose CTAs
// loop over tiles run on a persistent grid filling the SMs where that pays (sm90_ws).
jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              int64_t sm_count = 0);

}  // namespace tilefmha::codegen
