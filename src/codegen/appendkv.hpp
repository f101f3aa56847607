// Codegen of the append-KV kernel (kernels/fmha/appendkv.h; family fwd_appendkv, pipeline
// appendkv): support check, translation unit and launch shape. The kernel is specialized on the
// element type, the widest head dim max(hdim_q, hdim_v), warps, whether the cache is paged and
// the RoPE kind; block_m, block_n, block_k, stages, the padding flags, page_size and kv_layout do
// not shape it (it checks every bound, reads the page size at run time and addresses pools
// through strides).
#pragma once

#include <cstdint>
#include <string>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_appendkv(const KernelConfig& config);
std::string generate_appendkv_source(const KernelConfig& config);
int threads_per_block_appendkv(const KernelConfig& config);
// The kernel takes no shared memory: each row goes register to global.
int64_t shared_bytes_appendkv(const KernelConfig& config);
// Rows the launch moves: new K and V rows (batch x seqlen_knew x nhead_k each), and Q rows
// (batch x seqlen_q x nhead_q) when Q rotates.
int64_t appendkv_rows(const Problem& problem);

// How the kernel's thread groups split the rows: each group moves a run of consecutive heads of
// one token (K and V runs of k_run heads, Q runs of q_run), sharing the token's RoPE angles. A
// token's heads split into runs as even as fmha::kAppendKvRunHeads allows (12 heads: two runs of
// 6), so that the last run is rarely much shorter; without RoPE every run is one head.
struct AppendKvRuns {
  int64_t k_run = 1;
  int64_t k_groups = 0;  // K groups; as many V groups follow them
  int64_t q_run = 1;
  int64_t q_groups = 0;  // 0 unless Q rotates
  // A quantizing append (quantizes_append): the page segments a sequence's new tokens can reach,
  // a group per (sequence, segment, KV head) of K and of V; 0 otherwise.
  int64_t segments = 0;
  int64_t groups() const { return 2 * k_groups + q_groups; }
};
AppendKvRuns appendkv_runs(const Problem& problem);

// One CTA per groups-per-CTA of appendkv_runs(problem).groups(). Throws Error(not_supported) when
// the problem's head dims exceed the kernel's, its RoPE kind is not the kernel's or the groups
// exceed the grid.
jit::LaunchShape launch_shape_appendkv(const KernelConfig& config, const Problem& problem);

}  // namespace tilefmha::codegen
