// Codegen of the split-KV combine kernel (kernels/fmha/splitkv_combine.h; family
// fwd_splitkv_combine, pipeline combine): support check, translation unit and launch shape.
// The tile reads: block_m rows (one row = one (batch, head, position)) per CTA, warps * 32
// threads, block_n splits staged per pass; hdim_v is the widest head dim it merges. The other
// tile fields (hdim_q, block_k, stages) and the padding flags do not shape it: it checks every
// bound.
#pragma once

#include <cstdint>
#include <string>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_combine(const KernelConfig& config);
std::string generate_combine_source(const KernelConfig& config);
int threads_per_block_combine(const KernelConfig& config);
// The kernel's static shared memory (the staged LSEs); it takes no dynamic shared memory.
int64_t shared_bytes_combine(const KernelConfig& config);
// One CTA per block_m rows of the problem's O: rows = batch x nhead_q x seqlen_q, or in group
// mode 1 x nhead_q x total tokens. Serves a fwd_splitkv_combine problem and the combine stage of
// a split forward problem alike (same O and LSE shapes). Throws Error(not_supported) when the
// problem's hdim_v exceeds the kernel's or the rows exceed the grid.
jit::LaunchShape launch_shape_combine(const KernelConfig& config, const Problem& problem);

}  // namespace tilefmha::codegen
