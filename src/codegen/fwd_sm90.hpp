// Codegen of the sm90_ws forward pipeline (Hopper warp-specialized, kernels/fmha/fwd_sm90.h):
// support check, translation unit and launch shape of a KernelConfig with
// pipeline == sm90_ws. The generic codegen entry points dispatch here for that pipeline.
//
// Family fwd_splitkv compiles the same kernel in its split-KV mode (Sm90FwdTraits' SplitKv):
// tiles (query block, head, sequence, split), each visiting only its split's key blocks and
// writing fp32 partials (FwdParams::o_acc / lse_acc) for the combine. A fwd config's source is
// unchanged by it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fmha/fwd_sm90_shape.h"
#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the sm90_ws kernel does
// not implement, so a dispatcher can fall back to sm80_mma. Families fwd and fwd_splitkv; the
// latter without dropout, sink_logit or lse (the combine adds the sink logit and writes LSE),
// never persistent, and with block_n dividing 128 (fmha::kSplitKvGranule: a key block never
// straddles two splits). Paged K/V (fwd_pagedkv, batch_prefill, fwd_splitkv over pages) for
// tables of any page size (page_size 0): the problem's pages (8 keys or more) and the key block
// must nest, which the template checks per problem.
// FP8 inputs (fp8_e4m3, fp8_e5m2): O in bf16, head dims of 128 or 256 (whole 128-byte panels of
// 8-bit elements), key blocks of 128 (fmha::kSm90Fp8BlockN) and per_tensor, per_block or (paged
// caches) per_page descales.
void check_supported_sm90(const KernelConfig& config);
// The kernel's shared-memory layout (fmha::sm90_smem_layout for its tile and element size).
fmha::Sm90SmemLayout sm90_layout(const KernelConfig& config);
// Paged 16-bit kernels carry a second entry, sm90_gather_entry(config), for pages under
// kSm90MinPageSize keys: their producer warpgroup gathers rows with cp.async
// (fmha/fwd_sm90_gather.h) instead of loading a TMA box per page.
bool sm90_has_gather_entry(const KernelConfig& config);
std::string sm90_gather_entry(const KernelConfig& config);
// Split-KV kernels (family fwd_splitkv) carry a second entry, sm90_cluster_merge_entry(config),
// that merges the splits of a tile in its thread block cluster (fmha/fwd_sm90_cluster_merge.h)
// and writes O and LSE, so a plan needs no combine stage; launched with a cluster of num_splits
// CTAs (at most kSm90MaxClusterSplits).
std::string sm90_cluster_merge_entry(const KernelConfig& config);
inline constexpr int64_t kSm90MaxClusterSplits = fmha::kSm90MaxClusterSplits;
// The smallest page sm90_ws reads (fmha::kSm90MinPageRows).
inline constexpr int64_t kSm90MinPageSize = fmha::kSm90MinPageRows;
// The rows of one K/V TMA box of a paged problem: the block, or one page where pages are
// smaller.
int64_t sm90_paged_box_rows(const KernelConfig& config, const Problem& problem);
// Whether a paged problem's K and V stages are laid out in 8-row groups, so that one TMA box
// loads a page's rows of every panel (fmha/fwd_sm90_kv_layout.h): 16-bit kernels with two
// panels or more, unpadded head dims, pages of 8 or 16 keys (kSm90GroupedMaxPageSize), and pools
// whose heads lie side by side in a row (NHD) or whose pages are whole runs of heads (HND);
// `heads_in_pages` is the pool's heads for the latter, else 0 (Sm90FwdParams::kv_heads_in_pages).
// Larger pages keep a box per panel: the grouped box {64, 8, panels, rows / 8} measured no faster
// at pages of 32 and slower for whole blocks (batch prefill, 2 x 8k tokens, page 1024: 1820 ->
// 1953 us; pages of 8 and 16 gained 25% and 6%; H100, docs/performance.md serving v13).
inline constexpr int64_t kSm90GroupedMaxPageSize = 16;
struct Sm90KvGrouping {
  bool grouped = false;
  int64_t heads_in_pages = 0;
};
Sm90KvGrouping sm90_kv_grouping(const KernelConfig& config, const Problem& problem);

// Implementation choices that are not part of a kernel's identity (its KernelConfig): how the
// consumer warpgroups schedule GEMMs and softmax, and whether CTAs loop over tiles.
struct Sm90Variant {
  fmha::Sm90Schedule schedule = fmha::Sm90Schedule::pingpong;
  // Whether the CTAs loop over tiles. Such a kernel runs either grid: one CTA per tile (each
  // loops once) or a persistent grid filling every CTA slot of the SMs (launch_shape_sm90).
  bool persistent = false;
};

// Pingpong when the tile has several consumer warpgroups (fp8: never), else intra-warpgroup
// overlap; CTAs loop over tiles when config.persistent (the looping code is up to 10% slower when
// each CTA runs one tile, so only the persistent form has it).
Sm90Variant default_sm90_variant(const KernelConfig& config);

// Whether a persistent grid (CTAs filling the SMs, looping over tiles) beats one CTA per tile for
// `config` on `problem`. With tiles of equal cost (no mask), where O has its own shared buffer
// (Sm90SmemLayout::separate_o): the next tile's Q then loads under this tile's last GEMM and
// epilogue (H200, bf16, hdim 128, 512 tokens: +27%). Under causal and window masks, whose query
// blocks see different key counts, up to 8k rows (from 1k where O shares the Q buffer): the
// scheduler deals tiles out in pairs of equal total work, so the rounds stay even (H100:
// +10-21% at hdim 128). Never for ragged
// sequences (group mode, per-batch key lengths), whose tiles no static order can balance.
bool sm90_persistent_grid_pays(const KernelConfig& config, const Problem& problem);

// Whether codegen lets `config` run its decode tiles on warp MMAs (KernelConfig::warp_decode):
// an sm90_ws fwd_splitkv kernel on fp16 or bf16, no mask, bias, soft cap or dropout, 64 x 128
// tiles. Where the form pays is the dispatcher's call (runtime::warp_decode_pays).
bool sm90_warp_decode_supported(const KernelConfig& config);

// Whether `config` should run with GQA groups packed (KernelConfig.pack_gqa) on `problem`: query
// rows shorter than block_m, a group of 2..64 query heads per KV head dividing 64, batch mode,
// and none of the per-head features (dropout, sink logit, bias, ALiBi, soft cap). A tile then
// holds block_m / g query positions of all g heads, and K/V is read once per KV head.
// It answers split-KV decode too, so there is no separate policy for splits: a split divides
// the keys, not the query rows, so a packed tile still fills g times the rows of an unpacked one
// and each K/V chunk is still read once per KV head instead of once per query head. Packing
// leaves g times fewer tiles per split, which the dispatcher's split count makes up for (more
// splits, each a cheaper K/V chunk), while unpacked tiles would stream every chunk g times.
bool sm90_pack_gqa_pays(const KernelConfig& config, const Problem& problem);

// The translation unit of `config` (checks support first; a fwd_splitkv config refuses a
// persistent variant, naming `persistent`).
std::string generate_sm90_source(const KernelConfig& config);
std::string generate_sm90_source(const KernelConfig& config, const Sm90Variant& variant);

// Threads per block: one producer plus block_m / 64 consumer warpgroups.
int threads_per_block_sm90(const KernelConfig& config);

// CTAs of `config` an SM runs at once (fmha::sm90_ctas_per_sm): the launch bounds' minimum and
// the persistent grid's CTAs per SM.
int sm90_ctas_per_sm(const KernelConfig& config);

// The most tiles the sm90 scheduler (kernels/fmha/fwd_sm90_scheduler.h) takes. It numbers tiles
// in int32 and steps a tile number by the grid size (by twice that when it pairs tiles), and a
// one-CTA-per-tile grid is as large as the tile count, so the count must stay at or below 2^30
// for every step to fit.
inline constexpr int64_t kSm90MaxTiles = int64_t{1} << 30;

// The scheduler's tile count of `config` on `problem` with `num_splits` splits: query blocks
// (rounded up to whole pairs where a masked fwd kernel may pair them) x tile heads x batch x
// splits; nullopt when the product overflows int64.
std::optional<int64_t> sm90_scheduler_tiles(const KernelConfig& config, const Problem& problem,
                                            int64_t num_splits);

// Block, dynamic shared memory and a 1D grid over the tiles (query blocks x query heads x
// sequences, x splits for fwd_splitkv) of the default variant: for a persistent config, at most
// `sm_count` x sm90_ctas_per_sm CTAs (0: unknown, one per tile), else one CTA per tile. A
// fwd_splitkv config takes the problem's own problem.split.num_splits, a fwd config 1 split; a
// fwd problem planned in two stages (splits in the plan's workspace) must name its split count
// through the overload that takes num_splits.
jit::LaunchShape launch_shape_sm90(const KernelConfig& config, const Problem& problem,
                                   int64_t sm_count);
// For a persistent variant, at most `max_ctas` CTAs (the SM count: one resident CTA per SM),
// never more than tiles; with max_ctas 0 or a non-persistent variant, one CTA per tile. Throws
// Error(not_supported) past kSm90MaxTiles scheduler tiles. Splits as above.
jit::LaunchShape launch_shape_sm90(const KernelConfig& config, const Problem& problem,
                                   const Sm90Variant& variant, int64_t max_ctas);
// With `num_splits` splits per sequence: a fwd_splitkv config takes 1 or more (one CTA per
// tile, so max_ctas has no effect and a persistent variant is refused, naming `persistent`);
// a fwd config only 1. Error(invalid_argument) naming num_splits otherwise.
jit::LaunchShape launch_shape_sm90(const KernelConfig& config, const Problem& problem,
                                   const Sm90Variant& variant, int64_t max_ctas,
                                   int64_t num_splits);

}  // namespace tilefmha::codegen
