// Which tiles a CTA computes. Tiles (query block, query head, sequence) are numbered once and
// CTA c takes tiles c, c + gridDim.x, ...: a grid of one CTA per tile runs each tile in its
// own CTA, a persistent kernel (Traits::kPersistent) on one CTA per SM loops over many. The
// numbering puts query blocks fastest, so CTAs running together share a head's K/V in L2;
// under masks that give later query blocks more keys (causal, bottom-right windows), each
// head's blocks are numbered longest first, and a persistent grid (fewer CTAs than tiles)
// takes the longest blocks of all heads first, so its static round-robin stays balanced.
#pragma once

#include "fmha/fwd_params.h"
#include "tile/device.h"

namespace tilefmha::fmha {

struct Sm90Tile {
  int m_block;
  int head;
  int batch;
};

// Holds only a reference to the (constant-bank) parameters: the counts are re-read where
// needed rather than kept in registers across the consumers' main loop.
template <int BlockM, bool LongestFirst>
struct Sm90TileScheduler {
  const FwdParams& p;

  TILEFMHA_DEVICE int m_blocks() const { return int((p.seqlen_q + BlockM - 1) / BlockM); }
  TILEFMHA_DEVICE int tiles() const { return m_blocks() * int(p.nhead_q) * int(p.batch); }
  TILEFMHA_DEVICE int first() const { return int(blockIdx.x); }
  TILEFMHA_DEVICE int next(int tile) const { return tile + int(gridDim.x); }

  TILEFMHA_DEVICE Sm90Tile tile(int index) const {
    const int heads = int(p.nhead_q);
    const int m_count = m_blocks();
    if (LongestFirst && int(gridDim.x) < tiles()) {
      // Persistent CTAs take tiles round-robin, so each round must hold tiles of one length:
      // the longest query block of every (sequence, head) first, then the next longest.
      const int sequences = heads * int(p.batch);
      const int m_from_end = index / sequences;
      const int rest = index - m_from_end * sequences;
      return {m_count - 1 - m_from_end, rest % heads, rest / heads};
    }
    const int m = index % m_count;
    const int rest = index / m_count;
    return {LongestFirst ? m_count - 1 - m : m, rest % heads, rest / heads};
  }
};

}  // namespace tilefmha::fmha
