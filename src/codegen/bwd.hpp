// Codegen of the three backward kernels: bwd_dot_do_o (pipeline bwd_dot_do_o,
// kernels/fmha/bwd_dot_do_o.h), bwd_dq_dk_dv on sm80_mma (kernels/fmha/bwd_sm80.h) and
// bwd_convert_dq (pipeline bwd_convert_dq, kernels/fmha/bwd_convert_dq.h): support checks,
// translation units and launch shapes.
//
// The row kernels (dot, convert) read block_m rows per CTA with `warps` warps, one warp per row;
// every head dim (a multiple of 8) runs through one loop, so hdim_q/hdim_v only name the kernel.
// The sm80_mma kernel runs one CTA per (key block, KV head, sequence), each warp owning 16 keys:
// block_n = 16 * warps.
#pragma once

#include <cstdint>
#include <string>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throw Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_bwd_rows(const KernelConfig& config);  // dot_do_o and convert_dq
void check_supported_bwd_sm80(const KernelConfig& config);
// The fields no GPU backward kernel has (pages, RoPE, fp8 scales, LSE output, sink trait,
// persistent or packed-GQA launch forms), refused by name.
void check_backward_fields(const KernelConfig& config);

std::string generate_bwd_rows_source(const KernelConfig& config);
std::string generate_bwd_sm80_source(const KernelConfig& config);

int threads_per_block_bwd(const KernelConfig& config);
int64_t shared_bytes_bwd_rows(const KernelConfig& config);  // none: no shared memory
int64_t shared_bytes_bwd_sm80(const KernelConfig& config);

// Rows of the row kernels: batch x seqlen_q x nhead_q (group mode: total tokens x nhead_q).
int64_t bwd_rows(const Problem& problem);
// One CTA per block_m rows. Throws Error(not_supported) past the grid's 2^31 - 1 CTAs.
jit::LaunchShape launch_shape_bwd_rows(const KernelConfig& config, const Problem& problem);
// Grid x over key blocks (of the longest sequence), y over KV heads, z over sequences. Throws
// Error(not_supported) past the grid's 65535 heads or sequences.
jit::LaunchShape launch_shape_bwd_sm80(const KernelConfig& config, const Problem& problem);
// Key blocks of the longest sequence: the dQ accumulator's slice count in deterministic mode.
int64_t bwd_key_blocks(const KernelConfig& config, const Problem& problem);

}  // namespace tilefmha::codegen
