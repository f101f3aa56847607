// The compile-time identity of one simt_f32 forward kernel, generated from a KernelConfig: head
// dims, tile, padding, and the same feature hooks (mask, logits transform, dropout) as the
// tensor-core kernels, so every pipeline computes one definition of each feature.
#pragma once

#include "fmha/fwd_hook_traits.h"
#include "fmha/fwd_simt_shape.h"

namespace tilefmha::fmha {

template <int HdimQ, int HdimV, int BlockM, int BlockN, int BlockK, int Warps, bool GroupMode,
          bool PadSeqlenQ, bool PadSeqlenK, bool PadHdimQ, bool PadHdimV, class Mask_,
          class Logits_, class Dropout_, bool StoreLse, bool SinkLogit>
struct FwdSimtTraits : FwdHookTraits<HdimQ, HdimV, GroupMode, PadSeqlenQ, PadSeqlenK, PadHdimQ,
                                     PadHdimV, Mask_, Logits_, Dropout_, StoreLse, SinkLogit> {
  using FwdSimtTraits::FwdHookTraits::kDq;
  using FwdSimtTraits::FwdHookTraits::kDv;

  static constexpr int kBlockM = BlockM;
  static constexpr int kBlockN = BlockN;
  static constexpr int kBlockK = BlockK;  // head-dim step of the unrolled Q.K loop
  static constexpr int kThreads = Warps * 32;

  // Thread layout: lane group `thread / 8` owns query rows slot, slot + kRowSlots, ...; within a
  // group, lane l owns the key pairs 2l + 16c (+1) of S and the O columns l + 8c.
  static constexpr int kLanesPerRow = kSimtLanesPerRow;
  static constexpr int kRowSlots = kThreads / kLanesPerRow;
  static constexpr int kRows = BlockM / kRowSlots;
  static constexpr int kKeys = BlockN / kLanesPerRow;
  static constexpr int kCols = kDv / kLanesPerRow;

  static constexpr int kSharedBytes = fwd_simt_shared_bytes(HdimQ, HdimV, BlockM, BlockN);

  static_assert(kRows >= 1 && kRows * kRowSlots == BlockM,
                "block_m must be a multiple of 4 * warps (8 lanes per row)");
  static_assert(BlockN % 16 == 0, "block_n must be a multiple of 16 (8 lanes x key pairs)");
  static_assert(kDq % BlockK == 0, "block_k must divide the padded hdim_q");
};

}  // namespace tilefmha::fmha
