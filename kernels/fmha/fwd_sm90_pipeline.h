// The shared-memory rings between the producer (TMA) and the consumer warpgroups: one
// "full" mbarrier per stage that TMA completes by transaction bytes, one "empty" mbarrier per
// stage that every consumer warp arrives on once it no longer reads the stage. K and V have
// separate rings so S = QK^T can start before V lands.
#pragma once

#include "fmha/fwd_sm90_shape.h"
#include "tile/mbarrier.h"

namespace tilefmha::fmha {

// A position in a ring of `Stages` slots. The phase bit flips at each wrap; a consumer waits
// for the full barrier's phase `phase`, the producer for the empty barrier's phase `phase ^ 1`
// (a fresh barrier counts its phase before the first as complete, so the first pass is free).
template <int Stages>
struct RingPosition {
  int stage = 0;
  tile::u32 phase = 0;

  TILEFMHA_DEVICE void advance() {
    if (++stage == Stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// Shared-window addresses of the kernel's mbarriers (see Sm90SmemLayout::barrier_offset).
template <int Stages>
struct Sm90Barriers {
  tile::u32 base;

  TILEFMHA_DEVICE tile::u32 q_full() const { return base; }
  TILEFMHA_DEVICE tile::u32 k_full(int stage) const { return base + 8u * (1 + stage); }
  TILEFMHA_DEVICE tile::u32 k_empty(int stage) const { return base + 8u * (1 + Stages + stage); }
  TILEFMHA_DEVICE tile::u32 v_full(int stage) const { return base + 8u * (1 + 2 * Stages + stage); }
  TILEFMHA_DEVICE tile::u32 v_empty(int stage) const {
    return base + 8u * (1 + 3 * Stages + stage);
  }

  // One thread initializes; the caller fences and synchronizes the block afterwards.
  TILEFMHA_DEVICE void init(int consumer_warps) const {
    tile::mbarrier_init(q_full(), 1);
    for (int stage = 0; stage < Stages; ++stage) {
      tile::mbarrier_init(k_full(stage), 1);
      tile::mbarrier_init(v_full(stage), 1);
      tile::mbarrier_init(k_empty(stage), consumer_warps);
      tile::mbarrier_init(v_empty(stage), consumer_warps);
    }
    tile::mbarrier_init_fence();
  }
};

// Named barrier ids (0 is __syncthreads): per consumer warpgroup, one for its turn to issue
// GEMMs under the pingpong schedule and one for its epilogue.
constexpr tile::u32 kSm90TurnBarrier = 1;
constexpr tile::u32 kSm90EpilogueBarrier = kSm90TurnBarrier + kSm90MaxConsumerGroups;

}  // namespace tilefmha::fmha
