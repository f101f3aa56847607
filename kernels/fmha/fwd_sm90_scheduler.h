// Which tile a CTA computes. One CTA per (query block, query head, sequence), query blocks
// fastest so that neighbouring CTAs share a head's K/V in L2. Under masks that give later
// query blocks more keys (causal, bottom-right windows), the longest blocks start first so the
// short ones fill the tail of the wave.
#pragma once

#include "tile/device.h"

namespace tilefmha::fmha {

struct Sm90Tile {
  int m_block;
  int head;
  int batch;
};

template <bool LongestFirst>
TILEFMHA_DEVICE Sm90Tile sm90_tile_of_block() {
  const int m_block = LongestFirst ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  return {m_block, int(blockIdx.y), int(blockIdx.z)};
}

}  // namespace tilefmha::fmha
