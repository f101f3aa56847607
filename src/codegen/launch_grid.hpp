// The grid of the forward kernels that run one CTA per (query block, query head, sequence)
// (sm80_mma, simt_f32).
#pragma once

#include "jit/module.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Grid x over query blocks of `block_m` rows, y over query heads, z over sequences, and
// `threads` threads per block; the caller adds the shared memory. Throws Error(not_supported)
// when the problem exceeds the grid's 65535 heads or sequences.
jit::LaunchShape query_block_grid(const Problem& problem, int block_m, int threads);

}  // namespace tilefmha::codegen
