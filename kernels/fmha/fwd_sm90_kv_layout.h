// Where a 16-bit K or V stage's rows lie in shared memory. Normally each 64-column panel holds
// the block's rows ([panel][block_n][128 B]), loaded a box per panel and page. Over a paged cache
// of small pages (codegen::sm90_kv_grouping) the stages are instead laid out in groups of 8 rows,
// every panel of a group together ([row / 8][panel][row % 8][128 B]), so that one 5D TMA box lands
// a page's rows of every panel: a key block of page 16 at hdim 128 takes 16 boxes instead of 32.
// The wgmma descriptors see the same 1024-byte swizzle atoms with other strides: 8-row groups
// `panels` KB apart, panels 1 KB apart. Both layouts follow one branch-free formula: a branch
// between a warpgroup's wgmmas makes ptxas fence them (C7519).
#pragma once

#include "fmha/fwd_sm90_shape.h"
#include "tile/device.h"

namespace tilefmha::fmha {

template <class Traits>
struct Sm90KvStageLayout {
  // Only paged 16-bit kernels choose at run time; fp8 V goes through the transposer.
  static constexpr bool kRuntime = Traits::kPaged && !Traits::kFp8;
  static constexpr tile::u32 kAtomBytes = 8 * kSm90RowBytes;

  int grouped;  // Sm90FwdParams::kv_grouped: 1 for 8-row groups, 0 for panels of whole blocks

  // The stride between 8-row groups (a descriptor's stride byte offset along the rows).
  template <int Panels>
  TILEFMHA_DEVICE tile::u32 group_bytes() const {
    if constexpr (!kRuntime) return kAtomBytes;
    return kAtomBytes + tile::u32(grouped) * (Panels - 1) * kAtomBytes;
  }
  // The stride between panels.
  TILEFMHA_DEVICE tile::u32 panel_bytes() const {
    constexpr tile::u32 kWhole = Traits::kBlockN * kSm90RowBytes;
    if constexpr (!kRuntime) return kWhole;
    return kWhole - tile::u32(grouped) * (kWhole - kAtomBytes);
  }
  // Bytes from the stage's start to row `row` of panel 0.
  template <int Panels>
  TILEFMHA_DEVICE tile::u32 row_offset(int row) const {
    if constexpr (!kRuntime) return tile::u32(row) * kSm90RowBytes;
    return (tile::u32(row) >> 3) * group_bytes<Panels>() + (tile::u32(row) & 7u) * kSm90RowBytes;
  }
};

}  // namespace tilefmha::fmha
