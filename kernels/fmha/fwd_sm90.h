// The Hopper warp-specialized forward kernel (FlashAttention-3 class, sm_90a), one CTA per
// (query block, query head, sequence):
//   * warpgroup 0 is the producer: it gives registers back (setmaxnreg) and one thread issues
//     the TMA loads of Q and of K/V blocks into mbarrier-guarded rings (fwd_sm90_producer.h);
//   * warpgroups 1.. are consumers, 64 query rows each, with the freed registers: wgmma
//     GEMMs, online softmax, in the schedule of Traits (fwd_sm90_consumer.h);
//   * each consumer normalizes and stores its rows of O and LSE (fwd_sm90_epilogue.h).
// Mask and logits features enter as the hooks of Traits, as in the sm80 kernel.
#pragma once

#include "fmha/fwd_sm90_consumer.h"
#include "fmha/fwd_sm90_epilogue.h"
#include "fmha/fwd_sm90_mask.h"
#include "fmha/fwd_sm90_params.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_producer.h"
#include "fmha/fwd_sm90_scheduler.h"
#include "fmha/fwd_sm90_traits.h"
#include "fmha/seq_info.h"
#include "tile/setmaxnreg.h"

namespace tilefmha::fmha {

template <class Traits>
TILEFMHA_DEVICE void fwd_sm90(const Sm90FwdParams& params) {
#if defined(TILEFMHA_HAS_SM90A)
  const FwdParams& p = params.base;
  extern __shared__ __align__(1024) unsigned char shared[];
  const tile::u32 smem =
      (tile::shared_address(shared) + (kSm90AtomBytes - 1)) & ~tile::u32(kSm90AtomBytes - 1);
  const Sm90Barriers<Traits::kStages> barriers{smem + Traits::kSmem.barrier_offset};

  constexpr bool kLongestFirst = !tile::same_type<typename Traits::Mask, NoMask>::value;
  const Sm90Tile tile_id = sm90_tile_of_block<kLongestFirst>();
  const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, tile_id.batch);
  const int m_begin = tile_id.m_block * Traits::kBlockM;
  if (m_begin >= seq.len_q) return;  // uniform over the CTA, before any barrier

  if (threadIdx.x == 0) barriers.init(Traits::kConsumerWarps);
  __syncthreads();

  const typename Traits::Mask mask(p, seq, m_begin, Traits::kBlockM);
  const KeyBlocks blocks = mask.key_blocks(Traits::kBlockN);
  const int warpgroup = threadIdx.x / kSm90WarpgroupThreads;

  if (warpgroup == 0) {
    if constexpr (Traits::kReallocateRegisters)
      tile::warpgroup_registers_decrease<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) sm90_produce<Traits>(params, seq, tile_id, blocks, smem, barriers);
  } else {
    if constexpr (Traits::kReallocateRegisters)
      tile::warpgroup_registers_increase<Traits::kConsumerRegisters>();
    const Sm90Consumer<Traits> consumer{warpgroup - 1, int(threadIdx.x % kSm90WarpgroupThreads),
                                        smem, barriers};
    const typename Traits::Logits logits(p, seq, tile_id.batch, tile_id.head);
    const int rows[2] = {m_begin + consumer.tile_row(0), m_begin + consumer.tile_row(1)};
    const Sm90ElementMask<typename Traits::Mask> element_mask(p, seq, m_begin, Traits::kBlockM,
                                                              rows);
    Sm90ConsumerState<Traits> state;
    consumer.run(state, blocks, m_begin, element_mask, logits, p.scale_log2);
    const float softmax_scale = Traits::kFusedScale ? p.scale_log2 : 1.0f;
    sm90_epilogue<Traits>(params, seq, tile_id, consumer, state, softmax_scale);
  }
#endif
}

}  // namespace tilefmha::fmha
