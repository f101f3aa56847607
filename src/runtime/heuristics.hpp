// Dispatch policy in one place: named functions, each with the measurements that justify it
// (docs/performance.md has the runs). Hardware limits are not policy: they come from the arch
// spec and the kernel templates.
#pragma once

#include <cstdint>

#include "runtime/device_info.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Higher is better among kernels that fit `problem`: the fastest pipeline, the least head-dim
// padding, no predication the problem does not need, then a tile that fills the SMs in whole
// waves.
double kernel_preference(const KernelConfig& kernel, const Problem& problem,
                         const DeviceInfo& device);

// The kernel as launched: an sm90_ws attention kernel packs GQA groups for short query rows, or
// runs on a persistent grid, where that pays for the problem (codegen::sm90_pack_gqa_pays,
// codegen::sm90_persistent_grid_pays); the sm90_ws backward runs on a persistent grid for short
// tiles (codegen::bwd_sm90_persistent_grid_pays). Other kernels launch as enumerated.
KernelConfig launch_form(KernelConfig kernel, const Problem& problem);

// CTAs (tiles) a one-pass launch of `kernel` runs for `problem`, and the CTAs the device holds
// at once for it (SMs x CTAs per SM).
int64_t attention_tiles(const KernelConfig& kernel, const Problem& problem);
int64_t resident_ctas(const KernelConfig& kernel, const DeviceInfo& device);

// Whether a problem may run as split-KV + combine at all: family fwd or fwd_pagedkv, and no
// dropout (partials do not carry it).
bool split_kv_allowed(const Problem& problem);

// Split count for `problem` on `split_kernel` (a fwd_splitkv kernel in its launch form):
// problem.split.num_splits when the caller fixed it (> 0), else the smallest count whose grid
// fills the device's SMs (one CTA each) within 85% of the best wave efficiency, with at least
// kMinKeysPerSplit keys per split; 1 when the one-pass grid already fills the device.
int64_t choose_num_splits(const Problem& problem, const KernelConfig& split_kernel,
                          const DeviceInfo& device);

// Keys a split must have for its partial's store and the combine's read to stay small next to
// its K/V reads (2 x hdim elements per key against one hdim row per split): one 128-key block.
// 512 left b=1 decode at 1k keys in 2 splits on 8 of 132 SMs' worth of CTAs; 8 splits ran 14%
// faster (H200, engine DecodeSplitThroughput, 2026-11-26).
inline constexpr int64_t kMinKeysPerSplit = 128;
// The combine reads every split's partial; beyond this, more splits only add that traffic.
inline constexpr int64_t kMaxAutoSplits = 128;

}  // namespace tilefmha::runtime
