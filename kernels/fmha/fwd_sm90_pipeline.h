// The shared-memory rings between the producer (TMA) and the consumer warpgroups: one
// "full" mbarrier per stage that TMA completes by transaction bytes, one "empty" mbarrier per
// stage that every consumer warp arrives on once it no longer reads the stage. K and V have
// separate rings so S = QK^T can start before V lands.
#pragma once

#include "fmha/fwd_sm90_shape.h"
#include "tile/mbarrier.h"

namespace tilefmha::fmha {

// Shared-window addresses of the kernel's mbarriers (see Sm90SmemLayout::barrier_offset):
// q_full / q_empty guard the Q tile (free again once the tile's last S = QK^T is done, or, where
// the epilogue reuses it for O, once O has left), then full / empty per stage of the K and V
// rings.
template <int Stages>
struct Sm90Barriers {
  tile::u32 base;

  TILEFMHA_DEVICE tile::u32 q_full() const { return base; }
  TILEFMHA_DEVICE tile::u32 q_empty() const { return base + 8u; }
  TILEFMHA_DEVICE tile::u32 k_full(int stage) const { return base + 8u * (2 + stage); }
  TILEFMHA_DEVICE tile::u32 k_empty(int stage) const { return base + 8u * (2 + Stages + stage); }
  TILEFMHA_DEVICE tile::u32 v_full(int stage) const { return base + 8u * (2 + 2 * Stages + stage); }
  TILEFMHA_DEVICE tile::u32 v_empty(int stage) const {
    return base + 8u * (2 + 3 * Stages + stage);
  }
  // FP8 only: the transposed V tile of the stage is written (every transposer thread arrives),
  // and free again (every consumer warp arrives). With a transposer, v_empty means the landed V
  // tile has been transposed (each transposer warp arrives), so the next V block loads while
  // the consumers still read the transposed one.
  TILEFMHA_DEVICE tile::u32 vt_full(int stage) const {
    return base + 8u * (2 + 4 * Stages + stage);
  }
  TILEFMHA_DEVICE tile::u32 vt_empty(int stage) const {
    return base + 8u * (2 + 5 * Stages + stage);
  }

  // One thread initializes; the caller synchronizes the block afterwards. `transposer_threads`
  // is 0 unless the kernel transposes V (fp8). `kv_loaders`: arrivals that fill a K or V stage,
  // 1 for TMA (which also counts bytes), one per thread for cp.async gathers.
  TILEFMHA_DEVICE void init(int consumer_warps, int transposer_threads = 0,
                            int kv_loaders = 1) const {
    tile::mbarrier_init(q_full(), 1);
    tile::mbarrier_init(q_empty(), consumer_warps);
    for (int stage = 0; stage < Stages; ++stage) {
      tile::mbarrier_init(k_full(stage), kv_loaders);
      tile::mbarrier_init(v_full(stage), kv_loaders);
      tile::mbarrier_init(k_empty(stage), consumer_warps);
      tile::mbarrier_init(v_empty(stage),
                          transposer_threads > 0 ? transposer_threads / 32 : consumer_warps);
      if (transposer_threads > 0) {
        tile::mbarrier_init(vt_full(stage), transposer_threads);
        tile::mbarrier_init(vt_empty(stage), consumer_warps);
      }
    }
    tile::mbarrier_init_fence();
  }
};

// Ring slot and phase of the `step`-th key block a CTA processes (counted over all its
// tiles): both roles derive positions from the count, so no ring state stays live. A consumer
// waits for a full barrier's phase `phase`, the producer for the empty barrier's `phase ^ 1`
// (a fresh barrier counts the phase before its first as complete: the first pass is free).
template <int Stages>
TILEFMHA_DEVICE int ring_stage(int step) {
  return step % Stages;
}
template <int Stages>
TILEFMHA_DEVICE tile::u32 ring_phase(int step) {
  return tile::u32(step / Stages) & 1u;
}

// Named barrier ids (0 is __syncthreads): per consumer warpgroup, one for its turn to issue
// GEMMs under the pingpong schedule and one for its epilogue.
constexpr tile::u32 kSm90TurnBarrier = 1;
constexpr tile::u32 kSm90EpilogueBarrier = kSm90TurnBarrier + kSm90MaxConsumerGroups;

}  // namespace tilefmha::fmha
