// Decode tiles on warp MMAs. A decode tile holds 4-16 query rows of its 64 (a packed GQA group,
// or a split's few queries), and wgmma's 64-row shape makes the consumer warpgroup compute all
// 64 in both GEMMs: on short decodes those GEMMs were ~1.3 us of an 8.7 us call (H200, b8 32/8
// hdim 64 at 1k keys, measured by leaving them out). Where the tile's queries fit 16 rows, each
// of the consumer's four warps instead takes 32 keys of every 128-key block and computes S and
// O += P V for rows 0-15 alone with m16n8k16 mma.sync (fwd_sm90_warp_mma.h: Q's fragments in
// registers for the tile, K by ldmatrix, V by ldmatrix.trans from the TMA-swizzled stages), and
// each warp runs its own online softmax over its keys. At the tile's end the four (max, sum, O)
// states merge through the last V stage into warp 0. An m16n8 accumulator lays out its rows and
// columns as a wgmma m64 accumulator does for its warp's 16 rows, and warp 0's rows are tile rows
// 0-15, so the epilogues (split partials, cluster merge, packed O) run unchanged; warps 1-3 hold
// tile rows 16-63, padding no epilogue stores. cuDNN's decode kernels take the same shape
// (16-row tiles on warp MMAs, docs/performance.md engine v11).
//
// A launch form of split-KV kernels (KernelConfig::warp_decode; codegen defines
// TILEFMHA_WARP_DECODE): the plan takes it where it measured faster (runtime::warp_decode_pays).
// Compiled into every decode kernel behind a run-time test, the second body cost tiles that kept
// wgmma 2.5% (b1 64/8 hdim 128, 8k keys, 4 query rows: 12.95 -> 13.28 us, H200). Plain decode only:
// no logits hook (the scale folds into the exponent), no mask but the sequence's end, no dropout,
// 16-bit inputs, one consumer warpgroup, 128-key blocks (codegen checks the config). A tile with
// more than 16 query rows keeps the wgmma consumer.
#pragma once

#include "fmha/fwd_sm90_consumer.h"
#include "fmha/fwd_sm90_warp_mma.h"
#include "tile/async_proxy.h"
#include "tile/named_barrier.h"

namespace tilefmha::fmha {

template <class Traits>
constexpr bool sm90_warp_decode_compiled() {
#if defined(TILEFMHA_WARP_DECODE)
  static_assert(Traits::kSplitKv && !Traits::kFp8 && Traits::kConsumerGroups == 1 &&
                    Traits::kFusedScale && Traits::kBlockN == 128 && !Traits::Dropout::kEnabled &&
                    tile::same_type<typename Traits::Mask, NoMask>::value,
                "warp MMAs run plain 16-bit split-KV decode tiles of 64 x 128");
  return true;
#else
  return false;
#endif
}

template <class Traits>
struct Sm90WarpDecode {
  using Consumer = Sm90Consumer<Traits>;
  using Mma = Sm90WarpMma<Traits>;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kWarpKeys = Mma::kWarpKeys;
  // Per lane in the merge area: O's accumulators, then the two rows' max and partial sum.
  static constexpr int kMergeFloats = Traits::kHdimV / 2 + 4;
  static_assert(3 * kMergeFloats * 32 * 4 <= Traits::kSmem.v_stage_bytes,
                "three warps' states fit in a V stage");

  const Consumer& consumer;

  TILEFMHA_DEVICE int warp() const { return consumer.thread / 32; }
  TILEFMHA_DEVICE int lane() const { return consumer.thread % 32; }
  TILEFMHA_DEVICE Mma mma() const { return {warp(), lane(), consumer.kv_layout}; }
  TILEFMHA_DEVICE tile::u32 k_stage(int stage) const {
    return consumer.smem + Traits::kSmem.k_offset + stage * Traits::kSmem.k_stage_bytes;
  }
  TILEFMHA_DEVICE tile::u32 v_stage(int stage) const {
    return consumer.smem + Traits::kSmem.v_offset + stage * Traits::kSmem.v_stage_bytes;
  }

  // The four warps' states into warp 0, through the V stage `stage` (every warp has read it).
  TILEFMHA_DEVICE void merge(Sm90ConsumerState<Traits>& state,
                             const Sm90OnlineSoftmax<kWarpKeys, true>& softmax, float scale,
                             int stage) const {
    const tile::u32 area = v_stage(stage);
    auto slot = [&](int w, int index) {
      return area + tile::u32((((w - 1) * kMergeFloats + index) * 32 + lane()) * 4);
    };
    constexpr int kO = Traits::kHdimV / 2;
    tile::named_barrier_sync(kSm90EpilogueBarrier, kSm90WarpgroupThreads);
    if (warp() > 0) {
#pragma unroll
      for (int i = 0; i < kO; ++i)
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(slot(warp(), i)), "f"(state.o[i])
                     : "memory");
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(slot(warp(), kO + r)),
                     "f"(softmax.row_max[r])
                     : "memory");
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(slot(warp(), kO + 2 + r)),
                     "f"(softmax.row_sum[r])
                     : "memory");
      }
    }
    tile::named_barrier_sync(kSm90EpilogueBarrier, kSm90WarpgroupThreads);
    if (warp() == 0) {
      float max[2][4], sum[2][4], factor[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        max[r][0] = softmax.row_max[r];
        sum[r][0] = softmax.row_sum[r];
#pragma unroll
        for (int w = 1; w < 4; ++w) {
          asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(max[r][w]) : "r"(slot(w, kO + r)));
          asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(sum[r][w]) : "r"(slot(w, kO + 2 + r)));
        }
        state.softmax.row_max[r] = sm90_warp_merge_factors(max[r], scale, factor[r]);
        float total = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) total += sum[r][w] * factor[r][w];
        state.softmax.row_sum[r] = total;
      }
#pragma unroll
      for (int i = 0; i < kO; ++i) {
        const int r = (i / 2) % 2;  // o[4j + 2r + e]
        float value = state.o[i] * factor[r][0];
#pragma unroll
        for (int w = 1; w < 4; ++w) {
          float other;
          asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(other) : "r"(slot(w, i)));
          value += other * factor[r][w];
        }
        state.o[i] = value;
      }
    } else {
      // Rows 16-63 of the tile: padding, whatever they hold.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        state.softmax.row_max[r] = softmax.row_max[r];
        state.softmax.row_sum[r] = softmax.row_sum[r];
      }
      // The stage goes back to the producer's TMA (the async proxy) after these writes.
      tile::fence_proxy_async_shared();
    }
  }

  // One tile's main loop, in place of Sm90Consumer::run, for a tile whose queries lie in rows
  // 0-15. `query[r]`: whether tile row lane / 4 + 8r holds a query.
  template <class Blocks>
  TILEFMHA_DEVICE void run(Sm90ConsumerState<Traits>& state, const Blocks& blocks,
                           const bool (&query)[2], float scale_log2, int step_base,
                           tile::u32 q_phase, int len_k) const {
    constexpr int kStages = Traits::kStages;
#pragma unroll
    for (int i = 0; i < Traits::kHdimV / 2; ++i) state.o[i] = 0.0f;
    if constexpr (Traits::kSplitKv) {
      if (blocks.count() == 0) return;  // an empty split: the producer loads no Q for it
    }
    tile::mbarrier_wait(consumer.barriers.q_full(), q_phase);
    consumer.stamp(tile::kTimelineQLanded);
    const Mma mma = this->mma();
    tile::u32 q[Mma::kQSteps][4];
    mma.load_q(consumer.smem + Traits::kSmem.q_offset, q);
    const int steps = blocks.count();
    if (steps == 0) {
      consumer.release_q_after(-1, 0);
      return;
    }
    Sm90OnlineSoftmax<kWarpKeys, true> softmax;
    softmax.track_rows(query);
    float s[kWarpKeys / 2];
    tile::u32 p[Mma::kKeySteps][4];
    float correction[2];
    for (int step = 0; step < steps; ++step) {
      const int stage = ring_stage<kStages>(step_base + step);
      const tile::u32 phase = ring_phase<kStages>(step_base + step);
      const int key_begin = blocks.block(step) * kBlockN;
      tile::mbarrier_wait(consumer.barriers.k_full(stage), phase);
      mma.qk(s, q, k_stage(stage));
      consumer.release(consumer.barriers.k_empty(stage));
      consumer.release_q_after(step, steps);
      if (key_begin + kBlockN > len_k) mma.mask_end(s, key_begin, len_k);
      softmax.update(s, scale_log2, correction);
      Consumer::rescale(state.o, correction);
      Mma::pack_p(s, p);
      tile::mbarrier_wait(consumer.barriers.v_full(stage), phase);
      consumer.clear_v_past_keys(stage, key_begin, len_k);
      mma.pv(state.o, p, v_stage(stage));
      if (step + 1 < steps) consumer.release(consumer.barriers.v_empty(stage));
    }
    consumer.stamp(tile::kTimelineLastPv);
    const int last = ring_stage<kStages>(step_base + steps - 1);
    merge(state, softmax, scale_log2, last);
    consumer.release(consumer.barriers.v_empty(last));
  }
};

}  // namespace tilefmha::fmha
