// Codegen of the sm90_ws forward pipeline (Hopper warp-specialized, kernels/fmha/fwd_sm90.h):
// support check, translation unit and launch shape of a KernelConfig with
// pipeline == sm90_ws. The generic codegen entry points dispatch here for that pipeline.
#pragma once

#include <cstdint>
#include <string>

#include "fmha/fwd_sm90_shape.h"
#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the sm90_ws kernel does
// not implement, so a dispatcher can fall back to sm80_mma.
void check_supported_sm90(const KernelConfig& config);

// The schedule a config gets by default: pingpong when the tile has several consumer
// warpgroups, else intra-warpgroup overlap.
fmha::Sm90Schedule default_sm90_schedule(const KernelConfig& config);

// The translation unit of `config` (checks support first). The schedule is an implementation
// choice, not part of the kernel's identity; the overload exists for tests and tuning.
std::string generate_sm90_source(const KernelConfig& config);
std::string generate_sm90_source(const KernelConfig& config, fmha::Sm90Schedule schedule);

// Threads per block: one producer plus block_m / 64 consumer warpgroups.
int threads_per_block_sm90(const KernelConfig& config);

// Block, dynamic shared memory and a 1D grid over the tiles (query blocks x query heads x
// sequences): one CTA per tile, or with `max_ctas` > 0 at most that many CTAs, each running
// tiles persistently (max_ctas = the SM count: one resident CTA per SM). The same compiled
// kernel serves both. Throws Error(not_supported) past 2^31 - 1 tiles.
jit::LaunchShape launch_shape_sm90(const KernelConfig& config, const Problem& problem);
jit::LaunchShape launch_shape_sm90(const KernelConfig& config, const Problem& problem,
                                   int64_t max_ctas);

}  // namespace tilefmha::codegen
