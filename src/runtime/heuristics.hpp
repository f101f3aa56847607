// Dispatch policy in one place: named functions, each with the measurements that justify it
// (docs/performance.md has the runs). Hardware limits are not policy: they come from the arch
// spec and the kernel templates.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/device_info.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Higher is better among kernels that fit `problem`: the fastest pipeline, the least head-dim
// padding, no predication the problem does not need, then a tile that fills the SMs in whole
// waves.
double kernel_preference(const KernelConfig& kernel, const Problem& problem,
                         const DeviceInfo& device);

// The kernel as launched: an sm90_ws attention kernel packs GQA groups for short query rows,
// and runs on a persistent grid, where each pays for the problem (codegen::sm90_pack_gqa_pays,
// codegen::sm90_persistent_grid_pays, and for packed tiles packed_tiles_persist_pays); the sm90_ws
// backward runs on a persistent grid for short tiles (codegen::bwd_sm90_persistent_grid_pays).
// Other kernels launch as enumerated.
KernelConfig launch_form(KernelConfig kernel, const Problem& problem);
bool packed_tiles_persist_pays(const KernelConfig& kernel, const Problem& problem);

// CTAs (tiles) a one-pass launch of `kernel` runs for `problem`, and the CTAs the device holds
// at once for it (SMs x CTAs per SM).
int64_t attention_tiles(const KernelConfig& kernel, const Problem& problem);
int64_t resident_ctas(const KernelConfig& kernel, const DeviceInfo& device);

// Whether a problem may run as split-KV + combine at all: family fwd or fwd_pagedkv, and no
// dropout (partials do not carry it).
bool split_kv_allowed(const Problem& problem);

// Split count for `problem` on `split_kernel` (a fwd_splitkv kernel in its launch form):
// problem.split.num_splits when the caller fixed it (> 0), else the count of least split_cost
// (the smallest among equals), with at least kMinKeysPerSplit keys per split and one CTA per SM;
// 1 when the one-pass grid already fills the device.
int64_t choose_num_splits(const Problem& problem, const KernelConfig& split_kernel,
                          const DeviceInfo& device);
// Whether a split-KV plan of `num_splits` splits may run as one kernel whose thread block
// clusters merge each tile's splits (codegen::sm90_cluster_merge_entry: no combine launch, no
// partials through L2): an sm90_ws split kernel reading its pages by TMA (not the gather entry of
// pages under 8 keys), 2..codegen::kSm90MaxClusterSplits splits, and splits of at most
// kClusterMergeMaxChunkKeys keys. The merge saves a fixed 1-1.5 us (the combine's launch and two
// trips through L2), which only short splits feel, while clusters may crowd two CTAs onto one
// SM where the hardware would spread them: b=1 32-head hdim-64 decode merged at 32k keys (4
// splits of 8k) went 70 -> 85 us, at 128k 245 -> 318 us (H200). The split count stays the one
// choose_num_splits picked: bringing 16 splits down to 8 to fit a cluster measured slower (b=1
// 32/8-head hdim-128 decode, H200: 8k keys 13.2 -> 14.7 us, 32k 38.6 -> 43.9 us a call;
// docs/performance.md engine v7).
bool merges_splits_in_cluster(const Problem& problem, const KernelConfig& split_kernel,
                              int64_t num_splits);
inline constexpr int64_t kClusterMergeMaxChunkKeys = 512;
// Where choose_num_splits picked `splits` that run through the combine: fewer, longer split
// counts to try merged in clusters instead, cheapest first (the caller checks that they merge
// and run in one wave). A count qualifies when its merged_split_cost beats split_cost at
// `splits` plus kCombineLaunchBlocks, it is at most kMergedAlternativeMaxSplits, and its splits
// hold at most kMergedAlternativeMaxChunkKeys keys. None where the caller fixed the count.
// b=1 32/8-head hdim-128 decode at 2k keys (8 tiles): 16 splits and a combine 8.2 us, 8 splits
// of 256 keys merged 7.56 us (H200, graphs of 20 calls, docs/performance.md engine v9); at 8k,
// 8 merged splits of 1k keys were 1.5 us slower than 16 through the combine (engine v7).
std::vector<int64_t> merged_split_alternatives(const Problem& problem,
                                               const KernelConfig& split_kernel,
                                               const DeviceInfo& device, int64_t splits);
// The combine's launch and its trips through L2, in key blocks, beside its batches: what a merge
// in clusters saves. The 2k and 8k measurements above bound it to 0.25..3.25 blocks; at 4k keys
// 8 merged splits (4 blocks each) read 9.97-10.15 us against 9.78-9.80 for 16 through the
// combine (2 blocks), which 0.75 keeps.
inline constexpr double kCombineLaunchBlocks = 0.75;
// Clusters of 16 over few tiles lose to the combine (b=1 12/2 heads at 8k keys: 2 clusters of
// 16, 11.8 us, against 32 splits and the combine, 9.8 us): the alternative stays within 8.
inline constexpr int64_t kMergedAlternativeMaxSplits = 8;
// Only splits of up to two blocks gain from merging over the combine: going from two blocks a
// split through the combine to three merged lost 0.1-0.35 us (b=8 28/4 heads at 1k keys, 4 -> 3
// splits; b=8 8/2 at 2k, 8 -> 6), where one block to two gained 0.3-0.5 us (engine v9).
inline constexpr int64_t kMergedAlternativeMaxChunkKeys = 256;
// Whether a split kernel whose clusters merge `num_splits` splits should run its decode tiles on
// warp MMAs (KernelConfig::warp_decode, fmha/fwd_sm90_warp_decode.h): warp_decode_may_pay for
// the kernel, contiguous K/V, packed GQA tiles whose queries fit 16 rows (group x query rows),
// and at most kWarpDecodeMaxClusterSplits splits a cluster. MHA decode was not measured on it
// and keeps wgmma (the kernel would run it: one query row a tile). Measured on an H200 against the
// wgmma consumer in one build (graphs of 20 calls, docs/performance.md engine v11): hdim-64 GQA
// decode at 1k keys, 2-4 splits merged, gains 3-7% (b8 32/8 8.49 -> 7.94-8.05 us, b8 64/8 8.80
// -> 8.13-8.23, b4 32/8 7.70 -> 7.44-7.51); clusters of 16 lose 5-7% (b1 64/8 hdim 64 at 8k keys
// 9.03 -> 9.48, b1 32/8 hdim 128 10.9 -> 11.7), and so does hdim 128 even at 2 splits (b8 32/8
// 1k 10.5 -> 10.67) and the combine's 32 splits (b1 12/2 hdim 128 8k 9.07 -> 9.43).
bool warp_decode_pays(const KernelConfig& split_kernel, const Problem& problem, int64_t num_splits);
// The kernel's part of that rule (also the ahead-of-time builds' test): an sm90_ws fwd_splitkv
// kernel at hdim 64 that codegen lets run on warp MMAs (16-bit, no mask, bias, soft cap).
bool warp_decode_may_pay(const KernelConfig& split_kernel);
inline constexpr int64_t kWarpDecodeMaxClusterSplits = 4;
// Whether `clusters` clusters run in one wave where the device holds `max_active_clusters` of
// them at once (cuOccupancyMaxActiveClusters; a cluster of 8 needs 8 SMs of one GPC, and GPCs
// have 16-18): a second wave doubles the kernel (b=1 16-head hdim-256 decode at 4k keys in 16
// clusters of 8: 20.5 -> 30.5 us, H200). Unknown (< 0, planning without a GPU): the model
// sm_count x ctas_per_sm / (2 x cluster size), half the SMs' worth.
bool clusters_run_in_one_wave(int64_t clusters, int64_t cluster_size, int64_t max_active_clusters,
                              int64_t sm_count, int64_t ctas_per_sm);

// The split kernel's time in key blocks of 128, for `tiles` one-pass tiles split `num_splits`
// ways over `slots` SMs: waves of CTAs, each wave as long as a CTA's chunk of keys plus
// kSplitCtaFixedBlocks, plus the combine's batches of splits (kCombineBatchBlocks each; none for
// one split). It counts only the splits that get keys. Before this model, the first
// count within 85% of the best wave efficiency took 15 splits for b=1 32/8-head decode (13 of
// them busy, with 5 blocks each) where 16 give 4 blocks each, and 7 splits of 1k keys (4 busy,
// 2 blocks each) where 8 give one.
double split_cost(int64_t tiles, int64_t seqlen_k, int64_t num_splits, int64_t slots);
// split_cost of a plan whose clusters merge its splits: no combine batches.
double merged_split_cost(int64_t tiles, int64_t seqlen_k, int64_t num_splits, int64_t slots);
// A split CTA's own cost beside its keys, in key blocks: its prologue (barriers, Q, the ring's
// first fill) and its partial O and LSE.
inline constexpr double kSplitCtaFixedBlocks = 1.0;
// The combine's cost in key blocks: a round trip through L2 per batch of kCombineSplitsPerBatch
// splits it merges (their loads in flight together, fmha/splitkv_combine.h). It decides between
// many one-block splits and half as many two-block ones where few tiles leave room for either
// (H200, graphs of 20 b=1 decode calls, us a call, docs/performance.md engine v8): 12/2 heads
// at 8k keys 64 splits 11.6, 32 splits 9.9; 8/2 11.2 -> 9.7; 32/1 hdim 128 11.1 -> 10.2, and at
// 32k 128 -> 64 splits 17.8 -> 14.7; at 4k, 32 splits (8.1-8.4) and 16 (8.4-8.5) are even, and
// 0.75 keeps 32 there.
inline constexpr double kCombineBatchBlocks = 0.75;
inline constexpr int64_t kCombineSplitsPerBatch = 16;

// Keys a split must have for its partial's store and the combine's read to stay small next to
// its K/V reads (2 x hdim elements per key against one hdim row per split): one 128-key block.
// 512 left b=1 decode at 1k keys in 2 splits on 8 of 132 SMs' worth of CTAs; 8 splits ran 14%
// faster (H200, engine DecodeSplitThroughput, 2026-11-26).
inline constexpr int64_t kMinKeysPerSplit = 128;
// Splits of at least this many keys count every resident CTA slot (two per SM for hdim 64), not
// one per SM: a CTA walking 16 or more blocks is bound by its own chain of GEMMs and softmax,
// which a second CTA on the SM overlaps. b=8 32/8 hdim-64 decode went from 2 splits to 4: 8k keys
// 50.4 -> 36.4 us (0.71x -> 0.98x cuDNN), 32k 184 -> 124 us (H200, engine v10). Shorter splits
// keep one CTA per SM (b=1 32/8 d64 8k would lose 29 splits for 14).
inline constexpr int64_t kAllSlotsMinChunkKeys = 2048;
// Packed GQA decode runs on a persistent grid up to this many keys (packed_tiles_persist_pays).
inline constexpr int64_t kPersistentPackedMaxKeys = 2048;
// The combine reads every split's partial; beyond this, more splits only add that traffic.
inline constexpr int64_t kMaxAutoSplits = 128;

}  // namespace tilefmha::runtime
