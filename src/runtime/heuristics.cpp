#include "runtime/heuristics.hpp"

#include <algorithm>
#include <utility>

#include "codegen/bwd_sm90.hpp"
#include "codegen/fwd_sm90.hpp"
#include "fmha/splitkv.h"

namespace tilefmha::runtime {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Wave efficiency of `ctas` CTAs on `slots` CTA slots: the busy share of the last wave's slots.
double wave_efficiency(int64_t ctas, int64_t slots) {
  if (ctas <= 0 || slots <= 0) return 0;
  const int64_t waves = ceil_div(ctas, slots);
  return static_cast<double>(ctas) / static_cast<double>(waves * slots);
}

// Query rows one (sequence, KV head) contributes to a tile: seqlen_q, times the GQA group where
// packing can put the group's heads in one tile.
int64_t query_rows_per_tile(const Problem& problem) {
  const int64_t group = problem.nhead_k > 0 ? problem.nhead_q / problem.nhead_k : 1;
  const bool packable =
      group >= 2 && group <= fmha::kSm90WarpgroupRows && problem.mode == Mode::batch;
  return problem.seqlen_q * (packable ? group : 1);
}

}  // namespace

double kernel_preference(const KernelConfig& kernel, const Problem& problem,
                         const DeviceInfo& device) {
  double score = 0;
  if (kernel.pipeline == Pipeline::sm90_ws) score += 1000;
  if (kernel.pipeline == Pipeline::sm80_mma) score += 500;
  score -= 2.0 * ((kernel.hdim_q - problem.hdim_q) + (kernel.hdim_v - problem.hdim_v));
  const bool ragged_q = problem.mode == Mode::group || problem.seqlen_q % kernel.block_m != 0;
  // The backward row kernels have no key tile (block_n 0).
  const bool ragged_k = problem.mode == Mode::group || problem.has_key_lengths() ||
                        (kernel.block_n > 0 && problem.seqlen_k % kernel.block_n != 0);
  // Predicated loads cost the portable pipeline; TMA bounds-checks sequence tiles for free.
  const bool padding_costs = kernel.pipeline != Pipeline::sm90_ws;
  if (padding_costs && kernel.pad_seqlen_q && !ragged_q) score -= 20;
  if (padding_costs && kernel.pad_seqlen_k && !ragged_k) score -= 20;
  if ((kernel.pad_hdim_q && kernel.hdim_q == problem.hdim_q) ||
      (kernel.pad_hdim_v && kernel.hdim_v == problem.hdim_v))
    score -= 10;
  const int64_t ctas = problem.batch * problem.nhead_q * ceil_div(problem.seqlen_q, kernel.block_m);
  score += 100 * wave_efficiency(ctas, std::max<int64_t>(1, device.sm_count));
  // Bigger tiles amortize the K/V traffic once the grid fills the machine; key blocks wider
  // than 128 pay off only on long rows: from 8k keys unmasked, from 16k causal (sm90_ws at
  // hdim 128: below those the 128-wide tile, whose O buffer fits beside its rings, runs on a
  // persistent grid and wins; docs/performance.md).
  if (ctas >= device.sm_count) score += kernel.block_m / 16.0 + kernel.block_n / 32.0;
  const int64_t long_rows = problem.mask.kind == MaskKind::none ? 8192 : 16384;
  if (kernel.block_n > 128 && problem.seqlen_k < long_rows) score -= 10;
  // Masked short rows: few key blocks per query block, so the 192-row tile's extra masked work
  // and fewer, longer tiles lose to 128 rows (sm90_ws hdim 64 causal up to 2k: +13-15%).
  if (kernel.block_m > 128 && problem.mask.kind != MaskKind::none && problem.seqlen_q <= 2048)
    score -= 10;
  // Masked rows of 512 to 2k on one-consumer tiles that share an SM two CTAs at a time: one
  // CTA's tile ramp and epilogue run under the other's main loop (sm90_ws hdim 64 causal: 64
  // rows beat 128 by 1-5% and 192 by 8-49%).
  const bool masked_short =
      problem.mask.kind != MaskKind::none && problem.seqlen_q >= 512 && problem.seqlen_q <= 2048;
  if (masked_short && kernel.pipeline == Pipeline::sm90_ws && codegen::sm90_ctas_per_sm(kernel) > 1)
    score += 6;
  // Short query rows (decode, small chunks): a tile's rows past the problem's are wasted wgmma
  // work, and the 64-row tile runs two CTAs per SM, which keeps more K/V loads in flight. With
  // the wave bonus above alone, hdim-64 decode took the 192-row tile and read K/V at 52-68% of
  // copy bandwidth against cuDNN's 90-107% (H200, bench/decode_sweep.py, 2026-11-26).
  if (query_rows_per_tile(problem) <= 64 && kernel.block_m > 64)
    score -= 8.0 * (kernel.block_m / 64 - 1);
  score += kernel.stages;  // deeper pipelines hide latency when shared memory allows
  return score;
}

bool packed_tiles_persist_pays(const KernelConfig& kernel, const Problem& problem) {
  // A one-pass decode over many packed tiles, one CTA per SM: a persistent CTA loads the next
  // tile's K/V under this one's last blocks and epilogue, where a CTA per tile starts cold.
  // b32/b128 GQA hdim-128 decode at 1k keys: -4 to -6%. Where two CTAs share an SM (hdim 64)
  // the other already covers that start, and the static order lost 1-2% at 1k keys and 3-6%
  // from 8k (H200, decode_calls --sweep, engine v10); at 8k keys hdim 128 gained nothing.
  return codegen::sm90_ctas_per_sm(kernel) == 1 && problem.seqlen_k <= kPersistentPackedMaxKeys;
}

KernelConfig launch_form(KernelConfig kernel, const Problem& problem) {
  // Launch forms are derived here, never carried in from a registry entry or a caller's config.
  kernel.pack_gqa = false;
  kernel.persistent = false;
  kernel.accumulate = false;
  kernel.warp_decode = false;  // a split plan's choice (warp_decode_pays)
  if (kernel.pipeline != Pipeline::sm90_ws) return kernel;
  kernel.accumulate = problem.accumulate && kernel.family == Family::fwd;
  if (kernel.family == Family::bwd_dq_dk_dv) {
    // Turns at the dQ adds are a launch form too where they are faster than the default's
    // overlapping adds (the kernel is then the deterministic one).
    kernel.deterministic = codegen::bwd_sm90_takes_turns(kernel, problem);
    kernel.persistent = codegen::bwd_sm90_persistent_grid_pays(kernel, problem);
    return kernel;
  }
  // Paged decode packs its GQA groups like the contiguous one (K/V rows come from pages either
  // way); batch prefill is group mode, which a packed tile does not hold.
  if (kernel.family != Family::fwd && kernel.family != Family::fwd_splitkv &&
      kernel.family != Family::fwd_pagedkv)
    return kernel;
  kernel.pack_gqa = codegen::sm90_pack_gqa_pays(kernel, problem);  // short rows packed
  if (kernel.family == Family::fwd && codegen::sm90_persistent_grid_pays(kernel, problem) &&
      (!kernel.pack_gqa || packed_tiles_persist_pays(kernel, problem)))
    kernel.persistent = true;
  return kernel;
}

int64_t attention_tiles(const KernelConfig& kernel, const Problem& problem) {
  const int64_t group =
      kernel.pack_gqa && problem.nhead_k > 0 ? problem.nhead_q / problem.nhead_k : 1;
  const int64_t rows = std::max<int64_t>(1, kernel.block_m / group);
  const int64_t heads = kernel.pack_gqa ? problem.nhead_k : problem.nhead_q;
  return problem.batch * heads * ceil_div(std::max<int64_t>(problem.seqlen_q, 1), rows);
}

int64_t resident_ctas(const KernelConfig& kernel, const DeviceInfo& device) {
  const int64_t per_sm =
      kernel.pipeline == Pipeline::sm90_ws ? codegen::sm90_ctas_per_sm(kernel) : 1;
  return std::max<int64_t>(1, device.sm_count) * per_sm;
}

bool split_kv_allowed(const Problem& problem) {
  // Paged decode splits its long contexts like the contiguous forward (fwd_splitkv kernels read
  // pages too); batch prefill has query rows enough to fill the device.
  const bool splittable_family =
      problem.family == Family::fwd || problem.family == Family::fwd_pagedkv;
  // An accumulating forward merges into O in its epilogue, which split partials never reach.
  return splittable_family && !problem.has_dropout() && !problem.accumulate &&
         problem.split.num_splits != 1;
}

int64_t choose_num_splits(const Problem& problem, const KernelConfig& split_kernel,
                          const DeviceInfo& device) {
  if (problem.split.num_splits > 0) return problem.split.num_splits;
  const int64_t tiles = attention_tiles(split_kernel, problem);
  // One split CTA per SM: where two fit (hdim 64), filling both slots with half the keys each
  // lost to one per SM (b=1 32/8-head decode at 8k keys: 29 splits 18.1 us, 14 splits 15.9 us;
  // H200, bench/decode_sweep.py, 2026-11-26).
  const int64_t slots = std::max<int64_t>(1, device.sm_count);
  // A one-pass grid that already fills most slots gains nothing from splitting (FA2/FA3 use the
  // same 80% bar).
  if (tiles >= slots * 8 / 10) return 1;
  const int64_t max_splits =
      std::min<int64_t>({kMaxAutoSplits, std::max<int64_t>(1, problem.seqlen_k / kMinKeysPerSplit),
                         ceil_div(slots, std::max<int64_t>(tiles, 1)) * 2});
  // Long splits are bound by each CTA's chain of key blocks, which a second CTA on the SM
  // overlaps (hdim 64: two fit): there every slot counts.
  const int64_t resident = resident_ctas(split_kernel, device);
  auto slots_for = [&](int64_t s) {
    return splitkv_chunk(problem.seqlen_k, s) >= kAllSlotsMinChunkKeys ? resident : slots;
  };
  int64_t best = 1;
  double best_cost = split_cost(tiles, problem.seqlen_k, 1, slots_for(1));
  for (int64_t s = 2; s <= max_splits; ++s) {
    const double cost = split_cost(tiles, problem.seqlen_k, s, slots_for(s));
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

bool merges_splits_in_cluster(const Problem& problem, const KernelConfig& split_kernel,
                              int64_t num_splits) {
  const bool gathers_pages =
      problem.is_paged() && problem.paged.page_size < codegen::kSm90MinPageSize;
  return split_kernel.pipeline == Pipeline::sm90_ws && !gathers_pages && num_splits >= 2 &&
         num_splits <= codegen::kSm90MaxClusterSplits &&
         splitkv_chunk(problem.seqlen_k, num_splits) <= kClusterMergeMaxChunkKeys;
}

bool warp_decode_may_pay(const KernelConfig& split_kernel) {
  return codegen::sm90_warp_decode_supported(split_kernel) && split_kernel.hdim_q == 64 &&
         split_kernel.hdim_v == 64 && split_kernel.page_table == PageTableKind::none;
}

bool warp_decode_pays(const KernelConfig& split_kernel, const Problem& problem,
                      int64_t num_splits) {
  // Measured on packed GQA tiles only; MHA decode (one query row a tile) kept the wgmma consumer.
  if (!split_kernel.pack_gqa || problem.nhead_k <= 0) return false;
  const int64_t group = problem.nhead_q / problem.nhead_k;
  return warp_decode_may_pay(split_kernel) && !problem.is_paged() && problem.mode == Mode::batch &&
         group * problem.seqlen_q <= fmha::kSm90WarpDecodeRows && num_splits >= 2 &&
         num_splits <= kWarpDecodeMaxClusterSplits &&
         merges_splits_in_cluster(problem, split_kernel, num_splits);
}

bool clusters_run_in_one_wave(int64_t clusters, int64_t cluster_size, int64_t max_active_clusters,
                              int64_t sm_count, int64_t ctas_per_sm) {
  const int64_t capacity = max_active_clusters >= 0
                               ? max_active_clusters
                               : sm_count * ctas_per_sm / (2 * std::max<int64_t>(1, cluster_size));
  return clusters <= capacity;
}

double merged_split_cost(int64_t tiles, int64_t seqlen_k, int64_t num_splits, int64_t slots) {
  // Splits are whole granules of keys, so some counts leave the last splits empty: 15 splits of
  // 8k keys are 13 chunks of 640 keys, where 16 are 16 chunks of 512.
  const int64_t chunk = splitkv_chunk(seqlen_k, num_splits);
  const int64_t busy_splits = ceil_div(std::max<int64_t>(seqlen_k, 1), chunk);
  const int64_t waves = ceil_div(tiles * busy_splits, std::max<int64_t>(slots, 1));
  const double blocks = static_cast<double>(chunk) / fmha::kSplitKvGranule;
  return static_cast<double>(waves) * (blocks + kSplitCtaFixedBlocks);
}

double split_cost(int64_t tiles, int64_t seqlen_k, int64_t num_splits, int64_t slots) {
  const int64_t combine_batches = num_splits > 1 ? ceil_div(num_splits, kCombineSplitsPerBatch) : 0;
  return merged_split_cost(tiles, seqlen_k, num_splits, slots) +
         static_cast<double>(combine_batches) * kCombineBatchBlocks;
}

std::vector<int64_t> merged_split_alternatives(const Problem& problem,
                                               const KernelConfig& split_kernel,
                                               const DeviceInfo& device, int64_t splits) {
  if (problem.split.num_splits > 0) return {};
  const int64_t tiles = attention_tiles(split_kernel, problem);
  const int64_t slots = std::max<int64_t>(1, device.sm_count);
  const double two_stage =
      split_cost(tiles, problem.seqlen_k, splits, slots) + kCombineLaunchBlocks;
  std::vector<std::pair<double, int64_t>> paying;
  for (int64_t s = 2; s < splits && s <= kMergedAlternativeMaxSplits; ++s) {
    if (!merges_splits_in_cluster(problem, split_kernel, s) ||
        splitkv_chunk(problem.seqlen_k, s) > kMergedAlternativeMaxChunkKeys)
      continue;
    const double cost = merged_split_cost(tiles, problem.seqlen_k, s, slots);
    if (cost < two_stage) paying.emplace_back(cost, s);
  }
  std::stable_sort(paying.begin(), paying.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> counts;
  for (const auto& [cost, s] : paying) counts.push_back(s);
  return counts;
}

}  // namespace tilefmha::runtime
