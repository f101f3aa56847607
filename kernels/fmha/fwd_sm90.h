// The Hopper warp-specialized forward kernel (FlashAttention-3 class, sm_90a). Each CTA runs
// the tiles (query block, query head, sequence) its scheduler hands it (one per CTA, or
// persistently several; fwd_sm90_scheduler.h):
//   * warpgroup 0 is the producer: it gives registers back (setmaxnreg) and one thread (one
//     warp for a paged cache) issues the TMA loads of Q and of K/V blocks into
//     mbarrier-guarded rings (fwd_sm90_producer.h); pages under 8 keys are gathered by the
//     whole warpgroup with cp.async instead (fwd_sm90_gather.h);
//     with fp8 inputs, its warps 1..3 transpose each V block for P V (fwd_sm90_transpose.h);
//   * warpgroups 1.. are consumers, 64 query rows each, with the freed registers: wgmma
//     GEMMs, online softmax, in the schedule of Traits (fwd_sm90_consumer.h);
//   * each consumer normalizes and stores its rows of O and LSE (fwd_sm90_epilogue.h).
// Split-KV kernels (Traits::kSplitKv, family fwd_splitkv) add the split to the tile: a CTA
// visits the key blocks of its split only and writes the split's fp32 partial O and LSE.
// Mask and logits features enter as the hooks of Traits, as in the sm80 kernel.
#pragma once

#include "fmha/fwd_sm90_cluster_merge.h"
#include "fmha/fwd_sm90_consumer.h"
#include "fmha/fwd_sm90_epilogue.h"
#include "fmha/fwd_sm90_mask.h"
#include "fmha/fwd_sm90_params.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_producer.h"
#include "fmha/fwd_sm90_scheduler.h"
#include "fmha/fwd_sm90_traits.h"
#include "fmha/fwd_sm90_transpose.h"
#include "fmha/fwd_sm90_warp_decode.h"
#include "fmha/seq_info.h"
#include "tile/grid_dependency.h"
#include "tile/setmaxnreg.h"
#include "tile/timeline.h"

namespace tilefmha::fmha {

// The value, hidden from the optimizer: what is computed from it is computed again rather than
// kept in a register from an earlier, identical computation.
TILEFMHA_DEVICE int sm90_opaque(int value) {
  int copy;
  asm volatile("mov.b32 %0, %1;" : "=r"(copy) : "r"(value));
  return copy;
}

// Gather: the producer warpgroup gathers pages under 8 keys (fwd_sm90_gather.h) with more
// registers than the TMA producer's 24, taken from the consumers. ClusterMerge: a split kernel
// whose cluster merges its splits (fwd_sm90_cluster_merge.h).
template <class Traits, bool Gather, bool ClusterMerge = false>
TILEFMHA_DEVICE void fwd_sm90_body(const Sm90FwdParams& params) {
  constexpr int kProducerRegisters =
      Gather ? kSm90GatherProducerRegisters : Traits::kProducerRegisters;
  constexpr int kConsumerRegisters =
      Gather ? sm90_gather_consumer_registers(Traits::kConsumerGroups) : Traits::kConsumerRegisters;
  const FwdParams& p = params.base;
  extern __shared__ __align__(1024) unsigned char shared[];
  const tile::u32 smem =
      (tile::shared_address(shared) + (kSm90AtomBytes - 1)) & ~tile::u32(kSm90AtomBytes - 1);
  const Sm90Barriers<Traits::kStages> barriers{smem + Traits::kSmem.barrier_offset};
  constexpr bool kLongestFirst = !tile::same_type<typename Traits::Mask, NoMask>::value;
  const Sm90TileScheduler<kLongestFirst, Traits::kSplitKv, ClusterMerge> scheduler{params};

  // The stream's next grid, where launched with programmatic dependency (the combine, or the
  // next attention call), may be scheduled once every CTA's producer has issued its last load
  // (sm90_produce), and waits on the SMs for this grid's end instead of being launched after it.
  // TILEFMHA_DEPENDENTS_AT_ENTRY (an NVRTC define, for measuring) signals at entry instead.
#if defined(TILEFMHA_DEPENDENTS_AT_ENTRY)
  tile::allow_dependent_grid_launch();
#endif
  if (threadIdx.x == 0) {
    tile::timeline_stamp(tile::kTimelineEntry);
    barriers.init(Traits::kConsumerWarps, Traits::kTransposerThreads,
                  Gather ? kSm90GatherThreads : 1);
  }
  __syncthreads();
  // This grid is launched with programmatic dependency too (codegen/fwd_sm90_source.cpp): its
  // launch and barrier set-up overlap the previous grid's tail, but that grid's writes (Q, K, V,
  // lengths, page tables) and its reads of this grid's outputs are complete only from here.
  tile::wait_for_previous_grid();
  if (threadIdx.x == 0) tile::timeline_stamp(tile::kTimelineSetUp);
  const int warpgroup = threadIdx.x / kSm90WarpgroupThreads;

  if (warpgroup == 0) {
    if constexpr (Traits::kReallocateRegisters)
      tile::warpgroup_registers_decrease<kProducerRegisters>();
    // Paged caches load with the whole first warp (a TMA box per page), or the whole warpgroup
    // where pages are gathered row by row (fwd_sm90_gather.h); others with one thread.
    const unsigned producers = Gather ? kSm90GatherThreads : Traits::kPaged ? 32u : 1u;
    if (threadIdx.x < producers) {
      sm90_produce<Traits, Gather>(params, scheduler, smem, barriers, int(threadIdx.x));
    } else if constexpr (Traits::kFp8) {
      if (threadIdx.x >= 32)
        sm90_transpose_v<Traits>(params, scheduler, smem, barriers, int(threadIdx.x) - 32);
    }
    // The cluster's two syncs count every thread; the consumers merge between them, on their
    // registers (code after the roles' join would get the producers' few).
    if constexpr (ClusterMerge) {
      tile::cluster_sync();
      tile::cluster_sync();
    }
  } else {
    if constexpr (Traits::kReallocateRegisters)
      tile::warpgroup_registers_increase<kConsumerRegisters>();
    const Sm90Consumer<Traits> consumer{warpgroup - 1,
                                        int(threadIdx.x % kSm90WarpgroupThreads),
                                        smem,
                                        barriers,
                                        {params.kv_grouped}};
    consumer.open_turns();
    int step_base = 0;  // key blocks of earlier tiles: ring positions continue across tiles
    int q_loads = 0;
    for (int index = scheduler.first(); index < scheduler.count(); index = scheduler.next(index)) {
      const Sm90Tile tile_id = scheduler.tile(index);
      const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, tile_id.batch);
      const Sm90TileRows<Traits> tile_rows(p, tile_id.m_block);
      if (tile_rows.past_end(seq)) continue;  // the producer skips it alike
      const int m_begin = tile_rows.q_begin;
      const auto blocks = tile_rows.visited_blocks(p, seq, tile_id.split);
      const typename Traits::Logits logits(p, seq, tile_id.batch, tile_id.head);
      const int rows[2] = {tile_rows.position(consumer.tile_row(0)),
                           tile_rows.position(consumer.tile_row(1))};
      const Sm90ElementMask<typename Traits::Mask> element_mask(p, seq, m_begin, tile_rows.count,
                                                                rows);
      const typename Traits::Dropout dropout(p, tile_id.batch, tile_id.head);
      const int heads[2] = {tile_rows.head(tile_id.head, consumer.tile_row(0)),
                            tile_rows.head(tile_id.head, consumer.tile_row(1))};
      const int kv_head = Traits::kPackGqa ? tile_id.head : int(tile_id.head / p.head_group);
      const Sm90Descaler<Traits> descaler(p, seq, tile_id.batch, kv_head, rows, heads);
      Sm90ConsumerState<Traits> state;
      state.v_unit = Sm90Descaler<Traits>::initial_unit(p);
      if constexpr (Traits::kSplitKv || Traits::kPackGqa)
        state.softmax.track_rows({rows[0] < seq.len_q, rows[1] < seq.len_q});
      auto run_wgmma = [&] {
        consumer.run(state, blocks, m_begin, element_mask, logits, dropout, descaler, p.scale_log2,
                     step_base, tile::u32(q_loads) & 1u, seq.len_k);
      };
      if constexpr (sm90_warp_decode_compiled<Traits>()) {
        static_assert(!ClusterMerge || Sm90MergeArea<Traits>::kBytes <=
                                           Traits::kSmem.v_offset - Traits::kSmem.k_offset,
                      "warps 1-3 stage their rows in the K ring while warp 0 merges in a V stage");
        if (tile_rows.query_rows(seq) <= kSm90WarpDecodeRows) {
          // Every warp computes tile rows 0-15 (fwd_sm90_warp_decode.h): warp 0's rows.
          const int lane_row = consumer.thread % 32 / 4;
          const bool query[2] = {tile_rows.position(lane_row) < seq.len_q,
                                 tile_rows.position(lane_row + 8) < seq.len_q};
          Sm90WarpDecode<Traits>{consumer}.run(state, blocks, query, p.scale_log2, step_base,
                                               tile::u32(q_loads) & 1u, seq.len_k);
        } else {
          run_wgmma();
        }
      } else {
        run_wgmma();
      }
      step_base += blocks.count();
      ++q_loads;
      // The epilogue decodes the tile again from its index, so only the index (not the tile's
      // sequence facts) stays live across the main loop beside the accumulators.
      const Sm90Tile again = scheduler.tile(sm90_opaque(index));
      const SeqInfo epilogue_seq = SeqInfo::make<Traits::kGroupMode>(p, again.batch);
      const float softmax_scale = Traits::kFusedScale ? p.scale_log2 : 1.0f;
      if constexpr (ClusterMerge) {
        sm90_stage_split_partial<Traits>(consumer, state, softmax_scale,
                                         Sm90MergeArea<Traits>{smem + Traits::kSmem.k_offset});
      } else if constexpr (Traits::kSplitKv) {
        sm90_split_epilogue<Traits>(p, epilogue_seq, again, consumer, state, softmax_scale);
      } else {
        sm90_epilogue<Traits>(params, epilogue_seq, again, consumer, state, softmax_scale,
                              dropout.keep_scale());
      }
      consumer.stamp(tile::kTimelineStored);
      if constexpr (!Traits::kPersistent) break;
    }
    sm90_epilogue_drain(consumer);
    consumer.close_turns();
    if constexpr (ClusterMerge) {
      tile::cluster_sync();  // every split of the tile staged its partial
      const Sm90Tile tile_id = scheduler.tile(scheduler.first());
      const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, tile_id.batch);
      sm90_cluster_merge_rows<Traits>(p, seq, tile_id,
                                      Sm90MergeArea<Traits>{smem + Traits::kSmem.k_offset},
                                      int(threadIdx.x) - kSm90WarpgroupThreads);
      tile::cluster_sync();  // no CTA leaves while another still reads its partial
    }
  }
  // The first consumer thread reports: the producers run on few registers.
  tile::timeline_finish(Traits::kSplitKv ? "fwd_sm90 split" : "fwd_sm90",
                        threadIdx.x == kSm90WarpgroupThreads);
}

// The split kernel's entry whose cluster merges the splits (launched with a cluster of
// p.num_splits CTAs along x; the plan picks it: templates/fwd_sm90_template.cpp).
template <class Traits>
TILEFMHA_DEVICE void fwd_sm90_cluster_merge(const Sm90FwdParams& params) {
#if defined(TILEFMHA_HAS_SM90A)
  static_assert(Traits::kSplitKv && !Traits::kPersistent, "clusters merge one-CTA split tiles");
  fwd_sm90_body<Traits, false, true>(params);
#endif
}

template <class Traits>
TILEFMHA_DEVICE void fwd_sm90(const Sm90FwdParams& params) {
#if defined(TILEFMHA_HAS_SM90A)
  fwd_sm90_body<Traits, false>(params);
#endif
}

// The second entry of a paged 16-bit kernel, launched for pages under 8 keys (the plan picks
// it: templates/fwd_sm90_template.cpp). A separate entry rather than a branch inside one, so
// that each keeps its own registers and the TMA entry's code stays as small as before.
template <class Traits>
TILEFMHA_DEVICE void fwd_sm90_gather(const Sm90FwdParams& params) {
#if defined(TILEFMHA_HAS_SM90A)
  static_assert(Traits::kPaged && !Traits::kFp8, "only paged 16-bit kernels gather");
  fwd_sm90_body<Traits, true>(params);
#endif
}

}  // namespace tilefmha::fmha
