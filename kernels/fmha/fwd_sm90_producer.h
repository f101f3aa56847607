// The producer: one thread of the first warpgroup issues every TMA load of the tile. Q once,
// then K and V blocks into their rings in the order the consumers use them under the overlap
// schedule (K0, K1, V0, K2, V1, ..., V(n-1)); the serial schedule consumes them in an order
// this one never blocks.
#pragma once

#include "fmha/fwd_sm90_params.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_scheduler.h"
#include "fmha/mask.h"
#include "fmha/seq_info.h"
#include "tile/mbarrier.h"
#include "tile/tma.h"

namespace tilefmha::fmha {

TILEFMHA_DEVICE const tile::TensorMap* sm90_map(const Sm90TensorMap& map) {
  return reinterpret_cast<const tile::TensorMap*>(&map);
}

template <class Traits>
TILEFMHA_DEVICE void sm90_produce(const Sm90FwdParams& params, const SeqInfo& seq,
                                  const Sm90Tile& tile_id, const KeyBlocks& blocks, tile::u32 smem,
                                  const Sm90Barriers<Traits::kStages>& barriers) {
  constexpr int kStages = Traits::kStages;
  const tile::TensorMap* q_map = sm90_map(params.q_map);
  const tile::TensorMap* k_map = sm90_map(params.k_map);
  const tile::TensorMap* v_map = sm90_map(params.v_map);
  tile::tma_prefetch_descriptor(q_map);
  tile::tma_prefetch_descriptor(k_map);
  tile::tma_prefetch_descriptor(v_map);

  const int batch = int(seq.view_batch);
  const int head = tile_id.head;
  const int kv_head = int(head / params.base.head_group);
  const int q_row = int(seq.q_start) + tile_id.m_block * Traits::kBlockM;

  tile::mbarrier_arrive_expect_tx(barriers.q_full(), Traits::kQBytes);
#pragma unroll
  for (int panel = 0; panel < Traits::kHdimQ / kSm90PanelElements; ++panel) {
    tile::tma_load_4d(smem + Traits::kSmem.q_offset + panel * Traits::kQPanelBytes, q_map,
                      barriers.q_full(), panel * kSm90PanelElements, q_row, head, batch);
  }

  RingPosition<kStages> k_position, v_position;
  auto load_k = [&](int step) {
    const int key_row = int(seq.k_start) + blocks.block(step) * Traits::kBlockN;
    tile::mbarrier_wait(barriers.k_empty(k_position.stage), k_position.phase ^ 1u);
    const tile::u32 full = barriers.k_full(k_position.stage);
    tile::mbarrier_arrive_expect_tx(full, Traits::kSmem.k_stage_bytes);
    const tile::u32 destination =
        smem + Traits::kSmem.k_offset + k_position.stage * Traits::kSmem.k_stage_bytes;
#pragma unroll
    for (int panel = 0; panel < Traits::kHdimQ / kSm90PanelElements; ++panel) {
      tile::tma_load_4d(destination + panel * Traits::kKPanelBytes, k_map, full,
                        panel * kSm90PanelElements, key_row, kv_head, batch);
    }
    k_position.advance();
  };
  auto load_v = [&](int step) {
    const int key_row = int(seq.k_start) + blocks.block(step) * Traits::kBlockN;
    tile::mbarrier_wait(barriers.v_empty(v_position.stage), v_position.phase ^ 1u);
    const tile::u32 full = barriers.v_full(v_position.stage);
    tile::mbarrier_arrive_expect_tx(full, Traits::kSmem.v_stage_bytes);
    const tile::u32 destination =
        smem + Traits::kSmem.v_offset + v_position.stage * Traits::kSmem.v_stage_bytes;
#pragma unroll
    for (int panel = 0; panel < Traits::kHdimV / kSm90PanelElements; ++panel) {
      tile::tma_load_4d(destination + panel * Traits::kVPanelBytes, v_map, full,
                        panel * kSm90PanelElements, key_row, kv_head, batch);
    }
    v_position.advance();
  };

  const int steps = blocks.count();
  if (steps == 0) return;
  load_k(0);
  for (int step = 1; step < steps; ++step) {
    load_k(step);
    load_v(step - 1);
  }
  load_v(steps - 1);
}

}  // namespace tilefmha::fmha
