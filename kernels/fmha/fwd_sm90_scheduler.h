// Which tiles a CTA computes. Tiles (query block, query head, sequence) are numbered and CTA c
// takes numbers c, c + gridDim.x, ...: a grid of one CTA per tile runs each tile in its own CTA,
// a persistent kernel (Traits::kPersistent) on each CTA slot of the SMs loops over many. The
// numbering puts query blocks fastest, so CTAs running together share a head's K/V in L2; under
// masks that give later query blocks more keys (causal, bottom-right windows) each head's blocks
// are numbered longest first, which the hardware's dynamic CTA scheduling turns into a balanced
// one-CTA-per-tile grid. A persistent grid's static round-robin cannot balance that order, so
// there the numbers go in pairs: a CTA takes query blocks m_count - 1 - s and s of one head
// together, whose key blocks add up to the same count for every s, and pairs are dealt out
// round-robin in head order, so the rounds stay even and CTAs running together still share
// K/V.
//
// Split-KV (Split, one CTA per tile, never paired) adds the split to the tile. From fastest to
// slowest: query block, head, split, sequence. The query blocks of one (head, split) read the
// same K/V chunk; heads come next so that, unpacked, the query heads of a GQA group (adjacent
// heads) read their shared chunk together; splits then re-read only their head's Q, which is
// small beside a chunk of K/V; and a sequence's tiles stay together, its Q still in L2.
// Where a tile's splits merge in their cluster (ClusterOrder, fwd_sm90_cluster_merge.h), the
// CTAs take the same tiles in another order: split fastest, so that the splits of one tile are
// consecutive CTAs, the ranks of one cluster.
#pragma once

#include "fmha/fwd_sm90_params.h"
#include "tile/device.h"

namespace tilefmha::fmha {

struct Sm90Tile {
  int m_block;
  int head;
  int batch;
  int split;  // 0 unless split-KV
};

// Holds only a reference to the (constant-bank) parameters: the counts are re-read where
// needed rather than kept in registers across the consumers' main loop.
// The grid size and CTA index, read afresh at each use: values derived from them are
// recomputed after the main loop rather than kept in registers across it.
TILEFMHA_DEVICE int sm90_grid_ctas() {
  unsigned value;
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(value));
  return int(value);
}
TILEFMHA_DEVICE int sm90_cta_index() {
  unsigned value;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(value));
  return int(value);
}

template <bool LongestFirst, bool Split = false, bool ClusterOrder = false>
struct Sm90TileScheduler {
  static_assert(!ClusterOrder || Split, "only split tiles run in clusters");
  const Sm90FwdParams& params;

  TILEFMHA_DEVICE bool paired() const { return LongestFirst && !Split && params.paired != 0; }
  TILEFMHA_DEVICE int heads() const { return int(params.tile_heads.divisor); }
  // Numbers per (sequence, head): its query blocks, rounded up to whole pairs when paired.
  TILEFMHA_DEVICE int slots() const { return int(params.m_slots.divisor); }

  // The loop: for (n = first(); n < count(); n = next(n)) { tile(n) ... }
  TILEFMHA_DEVICE int count() const {
    if constexpr (Split)
      return slots() * heads() * int(params.tile_splits.divisor) * int(params.base.batch);
    else
      return slots() * heads() * int(params.base.batch);
  }
  TILEFMHA_DEVICE int first() const {
    if constexpr (ClusterOrder) {
      // CTA c = t * splits + r runs split r of one-pass tile t (query block, head, sequence).
      const int cta = sm90_cta_index();
      const int tile = int(tile::fast_divide(unsigned(cta), params.tile_splits));
      const int split = cta - tile * int(params.tile_splits.divisor);
      const int per_sequence = slots() * heads();
      const int batch = tile / per_sequence;
      return tile - batch * per_sequence +
             per_sequence * (split + int(params.tile_splits.divisor) * batch);
    }
    return paired() ? 2 * sm90_cta_index() : sm90_cta_index();
  }
  TILEFMHA_DEVICE int next(int n) const {
    if (!paired()) return n + sm90_grid_ctas();
    return n % 2 == 0 ? n + 1 : n - 1 + 2 * sm90_grid_ctas();
  }

  // The tile of number n: two multiply-shift divisions whatever the order. The second half of a
  // middle block's pair gets m_block = m_blocks, past every sequence's end, which both roles
  // skip.
  TILEFMHA_DEVICE Sm90Tile tile(int n) const {
    const int m_count = params.m_blocks;
    const int rest = int(tile::fast_divide(unsigned(n), params.m_slots));
    const int k = n - rest * slots();
    if constexpr (Split) {
      // Only the longest-first order applies: split grids run one CTA per tile, never paired.
      const int m = LongestFirst ? m_count - 1 - k : k;
      const int sequence_split = int(tile::fast_divide(unsigned(rest), params.tile_heads));
      const int batch = int(tile::fast_divide(unsigned(sequence_split), params.tile_splits));
      return {m, rest - sequence_split * heads(), batch,
              sequence_split - batch * int(params.tile_splits.divisor)};
    }
    const int batch = int(tile::fast_divide(unsigned(rest), params.tile_heads));
    int m = k;
    if (paired()) {
      const int slot = k / 2;
      m = k % 2 == 0 ? m_count - 1 - slot : (slot == m_count - 1 - slot ? m_count : slot);
    } else if (LongestFirst) {
      m = m_count - 1 - k;
    }
    return {m, rest - batch * heads(), batch, 0};
  }
};

}  // namespace tilefmha::fmha
