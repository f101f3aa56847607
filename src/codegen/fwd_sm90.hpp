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

// Implementation choices that are not part of a kernel's identity (its KernelConfig): how the
// consumer warpgroups schedule GEMMs and softmax, and whether CTAs loop over tiles.
struct Sm90Variant {
  fmha::Sm90Schedule schedule = fmha::Sm90Schedule::pingpong;
  // One CTA per tile (false) or at most one CTA per SM looping over tiles (true). Measured on
  // H100 (bf16): persistent wins a few percent at short sequences (s <= 1k, non-causal) and
  // loses up to 20% on long causal ones, so it is opt-in.
  bool persistent = false;
};

// Pingpong when the tile has several consumer warpgroups, else intra-warpgroup overlap; one
// CTA per tile.
Sm90Variant default_sm90_variant(const KernelConfig& config);

// The translation unit of `config` (checks support first).
std::string generate_sm90_source(const KernelConfig& config);
std::string generate_sm90_source(const KernelConfig& config, const Sm90Variant& variant);

// Threads per block: one producer plus block_m / 64 consumer warpgroups.
int threads_per_block_sm90(const KernelConfig& config);

// Block, dynamic shared memory and a 1D grid over the tiles (query blocks x query heads x
// sequences) of the default variant: one CTA per tile.
jit::LaunchShape launch_shape_sm90(const KernelConfig& config, const Problem& problem);
// For a persistent variant, at most `max_ctas` CTAs (the SM count: one resident CTA per SM),
// never more than tiles; a non-persistent variant always gets one CTA per tile. Throws
// Error(not_supported) past 2^31 - 1 tiles.
jit::LaunchShape launch_shape_sm90(const KernelConfig& config, const Problem& problem,
                                   const Sm90Variant& variant, int64_t max_ctas);

}  // namespace tilefmha::codegen
