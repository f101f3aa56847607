// The producer: one thread of the first warpgroup issues every TMA load of the CTA's tiles;
// for a paged cache the whole first warp does, one page's box per lane, so that the page-id
// loads (dependent global reads, one per page of a block) overlap instead of queueing behind
// each other and behind the TMA issues of one thread; pages under 8 keys are gathered by the
// whole first warpgroup (fwd_sm90_gather.h).
// Per tile, Q (once the consumers release the buffer: after the previous tile's last QK^T, or
// its O where O reuses the Q buffer), then K and V blocks into their
// rings in the order the consumers use them under the overlap schedule (K0, K1, V0, K2, V1,
// ..., V(n-1); fp8: K0, V0, K1, V1, ..., so each V block has its transpose's time to spare); the
// serial schedule consumes them in an order this one never blocks. A persistent CTA issues the next
// tile's K0 before its Q, so it lands while the consumers still finish the previous tile. A
// split-KV tile loads only the blocks of its split.
#pragma once

#include "fmha/fwd_sm90_gather.h"
#include "fmha/fwd_sm90_kv_layout.h"
#include "fmha/fwd_sm90_params.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_scheduler.h"
#include "fmha/fwd_sm90_traits.h"
#include "fmha/mask.h"
#include "fmha/paged_kv.h"
#include "fmha/seq_info.h"
#include "tile/grid_dependency.h"
#include "tile/mbarrier.h"
#include "tile/timeline.h"
#include "tile/tma.h"

namespace tilefmha::fmha {

TILEFMHA_DEVICE const tile::TensorMap* sm90_map(const Sm90TensorMap& map) {
  return reinterpret_cast<const tile::TensorMap*>(&map);
}

template <class Traits, bool Gather, class Scheduler>
TILEFMHA_DEVICE void sm90_produce(const Sm90FwdParams& params, const Scheduler& scheduler,
                                  tile::u32 smem, const Sm90Barriers<Traits::kStages>& barriers,
                                  int thread) {
  constexpr int kStages = Traits::kStages;
  // `thread`: this thread's index among the producers. Every producer walks the same tiles and
  // waits on the same barriers; only the leader announces bytes and issues the loads that are
  // not per page or per row.
  const bool leader = thread == 0;
  const int lane = thread;  // TMA per page: the producers are one warp
  const FwdParams& p = params.base;
  const tile::TensorMap* q_map = sm90_map(params.q_map);
  const tile::TensorMap* k_map = sm90_map(params.k_map);
  const tile::TensorMap* v_map = sm90_map(params.v_map);
  const Sm90KvStageLayout<Traits> kv_layout{params.kv_grouped};
  if (leader) {
    tile::tma_prefetch_descriptor(q_map);
    tile::tma_prefetch_descriptor(k_map);
    tile::tma_prefetch_descriptor(v_map);
  }

  int step_base = 0;  // key blocks loaded for earlier tiles
  int q_loads = 0;    // Q tiles loaded so far
  for (int index = scheduler.first(); index < scheduler.count(); index = scheduler.next(index)) {
    const Sm90Tile tile_id = scheduler.tile(index);
    const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, tile_id.batch);
    const Sm90TileRows<Traits> tile_rows(p, tile_id.m_block);
    if (tile_rows.past_end(seq)) continue;  // the consumers skip it alike
    const int m_begin = tile_rows.q_begin;
    const auto blocks = tile_rows.visited_blocks(p, seq, tile_id.split);

    const int batch = int(seq.view_batch);
    const int head = tile_id.head;  // the KV head itself when GQA groups are packed
    const int kv_head = Traits::kPackGqa ? head : int(head / p.head_group);
    // Block `step` of the tile into its ring slot: wait until the consumers freed the slot,
    // announce the bytes, then one TMA box per 64-column panel.
    auto load_block = [&](int step, tile::u32 empty, tile::u32 full, tile::u32 destination,
                          int stage_bytes, int panels, int panel_bytes,
                          const tile::TensorMap* map) {
      const int key_begin = blocks.block(step) * Traits::kBlockN;
      if constexpr (Gather) {
        const bool is_k = map == k_map;
        const TokenStrides& strides = is_k ? p.k_strides : p.v_strides;
        const auto* pool = static_cast<const typename Traits::Element*>(is_k ? p.k : p.v);
        tile::mbarrier_wait(empty, ring_phase<kStages>(step_base + step) ^ 1u);
        const int hdim = int(is_k ? p.hdim_q : p.hdim_v);
        Sm90GatherPages<Traits> pages;
        pages.fetch(PagedKeys::make(p, tile_id.batch), key_begin, seq.len_k, thread);
        const auto* head_pool = pool + kv_head * strides.head;
        if (is_k)
          sm90_gather_block<Traits, Traits::kHdimQ / Traits::kPanelElements>(
              destination, panel_bytes, head_pool, strides, pages, int(p.page_size), key_begin,
              hdim, thread, full);
        else
          sm90_gather_block<Traits, Traits::kHdimV / Traits::kPanelElements>(
              destination, panel_bytes, head_pool, strides, pages, int(p.page_size), key_begin,
              hdim, thread, full);
        return;
      }
      if constexpr (Traits::kPaged) {
        // Pages of at least a block: one box (the block) per panel at (slot, page). Smaller
        // pages: a box of one page's rows per page the block spans, lane `box` loading box
        // `box`; boxes wholly past the sequence's keys are skipped, since their table entries
        // are not the sequence's. Whatever such rows hold, the mask drops their keys and the
        // consumers zero their V. Pages hold at least kSm90MinPageSize (8) keys
        // (fwd_sm90_template.cpp), so a block has at most 32 boxes. Where the stages are laid
        // out in 8-row groups (fwd_sm90_kv_layout.h), one 5D box loads a page's rows of every
        // panel.
        static_assert(Traits::kBlockN <= 32 * 8, "one box per lane");
        const PagedKeys keys = PagedKeys::make(p, tile_id.batch);
        const int page_size = int(keys.page_size);
        const int box_rows = page_size < Traits::kBlockN ? page_size : Traits::kBlockN;
        const int wanted = seq.len_k - key_begin;
        const int boxes = wanted >= Traits::kBlockN ? Traits::kBlockN / box_rows
                                                    : (wanted + box_rows - 1) / box_rows;
        const int key = key_begin + lane * box_rows;
        // The page id is read before the slot wait, so its latency hides behind the wait.
        const int page = lane < boxes ? keys.pages[key / page_size] : 0;
        tile::mbarrier_wait(empty, ring_phase<kStages>(step_base + step) ^ 1u);
        if (leader)
          tile::mbarrier_arrive_expect_tx(full, stage_bytes / Traits::kBlockN * box_rows * boxes);
        __syncwarp();  // the bytes are announced before any lane's box can land
        if (lane < boxes && kv_layout.grouped) {
          // The box's first 8-row group, `panels` atoms a group; the map's head is either among
          // the panels (NHD: heads lie side by side in a row) or among the pages (HND).
          const int heads_in_pages = params.kv_heads_in_pages;
          tile::tma_load_5d(
              destination + tile::u32(lane * box_rows / 8 * panels) * 8 * kSm90RowBytes, map, full,
              0, 0, heads_in_pages ? 0 : kv_head * panels, (key % page_size) / 8,
              heads_in_pages ? page * heads_in_pages + kv_head : page);
        } else if (lane < boxes) {
          const tile::u32 rows = tile::u32(lane * box_rows * kSm90RowBytes);
#pragma unroll
          for (int panel = 0; panel < panels; ++panel) {
            tile::tma_load_4d(destination + panel * panel_bytes + rows, map, full,
                              panel * Traits::kPanelElements, key % page_size, kv_head, page);
          }
        }
      } else {
        tile::mbarrier_wait(empty, ring_phase<kStages>(step_base + step) ^ 1u);
        if (!leader) return;
        tile::mbarrier_arrive_expect_tx(full, stage_bytes);
#pragma unroll
        for (int panel = 0; panel < panels; ++panel) {
          tile::tma_load_4d(destination + panel * panel_bytes, map, full,
                            panel * Traits::kPanelElements, int(seq.k_start) + key_begin, kv_head,
                            batch);
        }
      }
    };
    auto load_k = [&](int step) {
      const int stage = ring_stage<kStages>(step_base + step);
      load_block(step, barriers.k_empty(stage), barriers.k_full(stage),
                 smem + Traits::kSmem.k_offset + stage * Traits::kSmem.k_stage_bytes,
                 Traits::kSmem.k_stage_bytes, Traits::kHdimQ / Traits::kPanelElements,
                 Traits::kKPanelBytes, k_map);
    };
    auto load_v = [&](int step) {
      const int stage = ring_stage<kStages>(step_base + step);
      load_block(step, barriers.v_empty(stage), barriers.v_full(stage),
                 smem + Traits::kSmem.v_offset + stage * Traits::kSmem.v_stage_bytes,
                 Traits::kSmem.v_stage_bytes, Traits::kHdimV / Traits::kPanelElements,
                 Traits::kVPanelBytes, v_map);
    };

    // Persistent CTAs load K0 first: it can land while the consumers still finish the previous
    // tile (and, where O shares the Q buffer, store its O from there).
    const int steps = blocks.count();
    if (Traits::kPersistent && steps > 0) load_k(0);
    // A split with no visible key needs no Q: its consumers write O = 0 and LSE = -inf at once.
    if constexpr (Traits::kSplitKv) {
      if (steps == 0) break;
    }
    tile::mbarrier_wait(barriers.q_empty(), (tile::u32(q_loads) & 1u) ^ 1u);
    if (leader) {
      // Packed groups that do not divide the tile load fewer rows than block_m.
      tile::mbarrier_arrive_expect_tx(barriers.q_full(),
                                      Traits::kQBytes / Traits::kBlockM * tile_rows.loaded_rows());
#pragma unroll
      for (int panel = 0; panel < Traits::kHdimQ / Traits::kPanelElements; ++panel) {
        const tile::u32 destination = smem + Traits::kSmem.q_offset + panel * Traits::kQPanelBytes;
        if constexpr (Traits::kPackGqa) {
          tile::tma_load_5d(destination, q_map, barriers.q_full(), panel * Traits::kPanelElements,
                            0, kv_head, int(seq.q_start) + m_begin, batch);
        } else {
          tile::tma_load_4d(destination, q_map, barriers.q_full(), panel * Traits::kPanelElements,
                            int(seq.q_start) + m_begin, head, batch);
        }
      }
    }
    ++q_loads;
    if (!Traits::kPersistent && steps > 0) load_k(0);
    if (leader) tile::timeline_stamp(tile::kTimelineLoadsIssued);
    if constexpr (Traits::kFp8) {
      // V(j) right after K(j): the transposer must finish it before P V(j), a block earlier
      // than the consumers need a landed 16-bit V.
      for (int step = 0; step < steps; ++step) {
        if (step > 0) load_k(step);
        load_v(step);
      }
    } else if (steps > 0) {
      for (int step = 1; step < steps; ++step) {
        load_k(step);
        load_v(step - 1);
      }
      load_v(steps - 1);
    }
    step_base += steps;
    if constexpr (!Traits::kPersistent) break;
  }
  // The next grid may be scheduled now (fwd_sm90.h). Signalled at entry, its CTAs took SMs early
  // and slowed this grid by 1-3% (H200: hdim-64 decode at 8k-32k keys, b=1 split decode).
#if !defined(TILEFMHA_DEPENDENTS_AT_ENTRY)
  if (leader) tile::allow_dependent_grid_launch();
#endif
}

}  // namespace tilefmha::fmha
