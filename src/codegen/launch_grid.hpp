// The grid of the forward kernels that run one CTA per (query block, query head, sequence)
// (sm80_mma, simt_f32), and per split as well for split-KV.
#pragma once

#include <cstdint>

#include "jit/module.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Grid x over query blocks of `block_m` rows, y over query heads, z over (sequence, split)
// pairs, z = b * num_splits + split (num_splits 1 without split-KV), and `threads` threads per
// block; the caller adds the shared memory. Throws Error(not_supported) when the problem exceeds
// the grid's 65535 heads or (sequence, split) pairs, Error(invalid_argument) when num_splits < 1.
jit::LaunchShape query_block_grid(const Problem& problem, int block_m, int threads,
                                  int64_t num_splits = 1);

}  // namespace tilefmha::codegen
