// The compile-time identity of one sm80_mma forward kernel, generated from a KernelConfig:
// element type, head dims, tile, padding, and the feature hooks (mask, logits transform,
// dropout) that the main loop calls. Features are types here, never flags in the main loop.
// SplitKv selects the fwd_splitkv form: the grid's z covers (sequence, split) pairs, a CTA visits
// only its split's keys and writes fp32 partials (fwd_params.h) instead of O and LSE. Paged reads
// K and V through the page table (fmha/paged_kv.h).
#pragma once

#include "fmha/fwd_hook_traits.h"
#include "fmha/fwd_shape.h"
#include "fmha/splitkv.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

template <class Element_, int HdimQ, int HdimV, int BlockM, int BlockN, int Warps, int Stages,
          bool GroupMode, bool PadSeqlenQ, bool PadSeqlenK, bool PadHdimQ, bool PadHdimV,
          class Mask_, class Logits_, class Dropout_, bool StoreLse, bool SinkLogit,
          bool SplitKv = false, bool Paged = false>
struct FwdTraits : FwdHookTraits<HdimQ, HdimV, GroupMode, PadSeqlenQ, PadSeqlenK, PadHdimQ,
                                 PadHdimV, Mask_, Logits_, Dropout_, StoreLse, SinkLogit> {
  using Element = Element_;
  using FwdTraits::FwdHookTraits::kDq;

  static constexpr int kBlockM = BlockM;
  static constexpr int kBlockN = BlockN;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kStages = Stages;
  static constexpr bool kSplitKv = SplitKv;
  // K/V from page pools through FwdParams' page table (families fwd_pagedkv, batch_prefill).
  static constexpr bool kPaged = Paged;
  // Each warp owns kMTiles consecutive 16-row slices of the query block.
  static constexpr int kMTiles = BlockM / (16 * Warps);

  // Q fragments stay in registers when they fit beside the O accumulators; otherwise they are
  // re-read from shared memory at every key block.
  static constexpr bool kQInRegisters = kMTiles * kDq <= 128;

  static constexpr int kSharedBytes =
      fwd_sm80_shared_bytes(HdimQ, HdimV, BlockM, BlockN, Stages, int(sizeof(Element)));

  static_assert(tile::same_type<Element, tile::half_t>::value ||
                    tile::same_type<Element, tile::bfloat16_t>::value,
                "sm80_mma computes on fp16 or bf16");
  static_assert(kMTiles >= 1 && kMTiles * 16 * Warps == BlockM,
                "block_m must be a multiple of 16 * warps");
  static_assert(BlockN % 16 == 0, "block_n must be a multiple of 16");
  static_assert(Stages >= 2 && Stages <= 4, "stages must be 2..4");
  // Split chunks are whole granules of keys; a block dividing the granule never straddles two
  // splits.
  static_assert(!SplitKv || kSplitKvGranule % BlockN == 0, "split-KV needs block_n dividing 128");
  // Partials exclude the sink logit (the combine adds it once) and the family has no dropout;
  // the combine writes the LSE.
  static_assert(!SplitKv || (!SinkLogit && !StoreLse && !Dropout_::kEnabled),
                "split-KV partials take no sink logit, dropout or LSE output");
  // Paged sequences have their own key counts: every key block is bounds-checked.
  static_assert(!Paged || PadSeqlenK, "a paged kernel pads seqlen_k");
};

}  // namespace tilefmha::fmha
