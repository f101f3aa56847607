// Where a 16-bit V stage's rows lie. Normally each 64-column panel holds the block's rows
// ([panel][block_n][128 B]). Over a paged cache whose pages hold fewer keys than a block (a power
// of two from 16 up), a page's rows of every panel lie together instead
// ([page][panel][page rows][128 B]), so that one TMA box loads a page's V where the normal layout
// needs one per panel: at hdim 128 a key block of page 16 takes 24 boxes instead of 32. K keeps a
// box per panel, since Q K^T reads a block's keys as one operand with one stride between rows.
// P V's descriptor steps 16 keys at a time, which stay inside one region, with the panel stride
// as its leading byte offset.
#pragma once

#include "fmha/fwd_sm90_shape.h"
#include "tile/device.h"

namespace tilefmha::fmha {

template <class Traits>
struct Sm90VStageLayout {
  static constexpr int kPanels = Traits::kHdimV / Traits::kPanelElements;
  // Only paged 16-bit kernels read the runtime layout; fp8 V goes through the transposer.
  static constexpr bool kRuntime = Traits::kPaged && !Traits::kFp8;

  int log2_rows;  // Sm90FwdParams::v_region_log2_rows

  TILEFMHA_DEVICE bool regions() const { return kRuntime && log2_rows != kSm90VWholeBlock; }
  // The formulas below hold for both layouts without a branch (kSm90VWholeBlock's regions
  // outgrow any block): a branch between a warpgroup's wgmmas makes ptxas fence them (C7519).
  // The stride between panels: the MN-major descriptor's leading byte offset.
  TILEFMHA_DEVICE tile::u32 panel_bytes() const {
    if constexpr (!kRuntime) return Traits::kVPanelBytes;
    const tile::u32 rows = 1u << log2_rows;
    return (rows < tile::u32(Traits::kBlockN) ? rows : tile::u32(Traits::kBlockN)) * kSm90RowBytes;
  }
  // Bytes from the stage's start to row `row` of panel 0: whole regions before it, then rows.
  TILEFMHA_DEVICE tile::u32 row_offset(int row) const {
    if constexpr (!kRuntime) return tile::u32(row) * kSm90RowBytes;
    const tile::u32 within = (1u << log2_rows) - 1;
    return ((tile::u32(row) & ~within) * kPanels + (tile::u32(row) & within)) * kSm90RowBytes;
  }
};

}  // namespace tilefmha::fmha
