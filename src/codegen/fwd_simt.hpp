// Codegen of the accurate fp32 forward pipeline on CUDA cores (kernels/fmha/fwd_simt.h): support
// check, translation unit and launch shape of a KernelConfig with pipeline == simt_f32. The
// generic entry points (generate.hpp) dispatch here for that pipeline.
#pragma once

#include <string>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_simt(const KernelConfig& config);
std::string generate_simt_source(const KernelConfig& config);
int threads_per_block_simt(const KernelConfig& config);
// One CTA per (query block, query head, sequence); shared memory from fwd_simt_shape.h.
jit::LaunchShape launch_shape_simt(const KernelConfig& config, const Problem& problem);

}  // namespace tilefmha::codegen
