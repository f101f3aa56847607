// Codegen of the portable sm80_mma forward pipeline (kernels/fmha/fwd_sm80.h): support check,
// translation unit and launch shape of a KernelConfig with pipeline == sm80_mma, family fwd,
// fwd_splitkv (the same kernel in its split form, FwdTraits' split_kv argument), fwd_pagedkv or
// batch_prefill (K/V through a page table, FwdTraits' paged argument; batch prefill is the group
// mode of the same kernel). The generic entry points (generate.hpp) dispatch here for that
// pipeline.
#pragma once

#include <cstdint>
#include <string>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_sm80(const KernelConfig& config);
std::string generate_sm80_source(const KernelConfig& config);
int threads_per_block_sm80(const KernelConfig& config);
// One CTA per (query block, query head, sequence, split): grid z = batch * num_splits
// (launch_grid.hpp); shared memory from fwd_shape.h. num_splits is 1 for a fwd kernel (other
// counts throw Error(not_supported)) and the plan's split count for a fwd_splitkv kernel.
jit::LaunchShape launch_shape_sm80(const KernelConfig& config, const Problem& problem,
                                   int64_t num_splits);
// As above with the problem's split count for a fwd_splitkv problem, else 1.
jit::LaunchShape launch_shape_sm80(const KernelConfig& config, const Problem& problem);

}  // namespace tilefmha::codegen
