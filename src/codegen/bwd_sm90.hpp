// Codegen of the Hopper backward kernel, bwd_dq_dk_dv on sm90_ws (kernels/fmha/bwd_sm90.h):
// support check, translation unit, shared memory and launch shape. One CTA per (block of keys,
// KV head, sequence): a producer warpgroup and two consumer warpgroups, which own 64 keys each
// up to hdim 128 and split the columns of 64 shared keys at hdim 256 (fmha/bwd_sm90_shape.h).
#pragma once

#include <cstdint>
#include <string>

#include "fmha/bwd_sm90_shape.h"
#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_bwd_sm90(const KernelConfig& config);
std::string generate_bwd_sm90_source(const KernelConfig& config);
int threads_per_block_bwd_sm90(const KernelConfig& config);
fmha::Sm90BwdSmemLayout bwd_sm90_layout(const KernelConfig& config);
int64_t shared_bytes_bwd_sm90(const KernelConfig& config);
// One grid dimension over (sequence, KV head, key block of the longest sequence), key block
// fastest. Throws Error(not_supported) past the grid's 2^31 - 1 CTAs.
jit::LaunchShape launch_shape_bwd_sm90(const KernelConfig& config, const Problem& problem);

}  // namespace tilefmha::codegen
