// Codegen of the portable sm80_mma forward pipeline (kernels/fmha/fwd_sm80.h): support check,
// translation unit and launch shape of a KernelConfig with pipeline == sm80_mma. The generic
// entry points (generate.hpp) dispatch here for that pipeline.
#pragma once

#include <string>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_sm80(const KernelConfig& config);
std::string generate_sm80_source(const KernelConfig& config);
int threads_per_block_sm80(const KernelConfig& config);
// One CTA per (query block, query head, sequence); shared memory from fwd_shape.h.
jit::LaunchShape launch_shape_sm80(const KernelConfig& config, const Problem& problem);

}  // namespace tilefmha::codegen
