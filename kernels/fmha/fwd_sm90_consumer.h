// A consumer warpgroup's main loop over the key blocks of its tile: S = Q K^T on wgmma with
// both operands in shared memory, the logits/mask hooks and the online softmax in registers,
// then O += P V with P re-packed from the S accumulators as the register A operand and V read
// through an MN-major descriptor. The schedule (Traits::kSchedule) decides how the two GEMMs
// and the softmax overlap; see Sm90Schedule in fwd_sm90_shape.h.
//
// FP8 inputs use k32 slices (32 bytes, like a 16-bit k16 slice), P rounded to e4m3, and V read
// K-major from the transposed tile the producer warpgroup writes (fwd_sm90_transpose.h), whose
// keys are ordered so that P's accumulator layout is directly the register A operand.
#pragma once

#include "fmha/fwd_sm90_descale.h"
#include "fmha/fwd_sm90_kv_layout.h"
#include "fmha/fwd_sm90_mask.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_softmax.h"
#include "fmha/mask.h"
#include "tile/async_proxy.h"
#include "tile/named_barrier.h"
#include "tile/timeline.h"
#include "tile/wgmma.h"

namespace tilefmha::fmha {

// Whether a block's softmax applies the element mask, as a type (a generic lambda's argument
// picks its code at compile time).
template <bool Check>
struct Sm90CheckMask {
  static constexpr bool value = Check;
};

// What a consumer warpgroup carries out of its main loop into the epilogue.
template <class Traits>
struct Sm90ConsumerState {
  float o[Traits::kHdimV / 2];
  // Split-KV and packed-GQA tiles are decode's: mostly padding rows.
  Sm90OnlineSoftmax<Traits::kBlockN, Traits::kSplitKv || Traits::kPackGqa> softmax;
  float v_unit;  // fp8: the V descale O is held in (Sm90Descaler); 1 otherwise
};

template <class Traits>
struct Sm90Consumer {
  using T = typename Traits::Element;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr bool kFp8 = Traits::kFp8;
  static constexpr int kSliceK = kFp8 ? 32 : 16;            // K elements of one wgmma (32 bytes)
  static constexpr int kQSteps = Traits::kHdimQ / kSliceK;  // slices of Q K^T
  static constexpr int kKeySteps = kBlockN / kSliceK;       // slices of P V
  static constexpr int kSlicesPerPanel = Traits::kPanelElements / kSliceK;
  static constexpr tile::u32 kTurnThreads = 2 * kSm90WarpgroupThreads;

  int group;   // consumer warpgroup index
  int thread;  // 0..127 within the warpgroup
  tile::u32 smem;
  Sm90Barriers<Traits::kStages> barriers;
  Sm90KvStageLayout<Traits> kv_layout;
  static constexpr int kKPanels = Traits::kHdimQ / Traits::kPanelElements;
  static constexpr int kVPanels = Traits::kHdimV / Traits::kPanelElements;

  // Row of the tile (0..block_m-1) of this thread's accumulator row r.
  TILEFMHA_DEVICE int tile_row(int r) const {
    return group * kSm90WarpgroupRows + (thread / 32) * 16 + (thread % 32) / 4 + 8 * r;
  }
  // Column (0..7 within a chunk) of this thread's accumulator element e.
  TILEFMHA_DEVICE int chunk_column(int e) const { return (thread % 4) * 2 + e; }

  // The 4 warps of the warpgroup each arrive once on an empty barrier.
  TILEFMHA_DEVICE void release(tile::u32 empty_barrier) const {
    if (thread % 32 == 0) tile::mbarrier_arrive(empty_barrier);
  }

  // With its own O buffer, the Q tile is free once the tile's last S = QK^T has completed
  // (`step` is the block just waited for); else the epilogue releases it after storing O.
  TILEFMHA_DEVICE void release_q_after(int step, int steps) const {
    if constexpr (Traits::kSmem.separate_o()) {
      if (step == steps - 1) release(barriers.q_empty());
    }
  }

  // Pingpong turn taking: wait until the previous warpgroup has issued its GEMMs, then let the
  // next one go once ours are issued.
  TILEFMHA_DEVICE void wait_turn() const {
    if constexpr (Traits::kPingpong)
      tile::named_barrier_sync(kSm90TurnBarrier + group, kTurnThreads);
  }
  TILEFMHA_DEVICE void pass_turn() const {
    if constexpr (Traits::kPingpong) {
      const int next = group + 1 == Traits::kConsumerGroups ? 0 : group + 1;
      tile::named_barrier_arrive(kSm90TurnBarrier + next, kTurnThreads);
    }
  }

  // S = Q K^T for the K block in `stage` (issued, not waited for).
  TILEFMHA_DEVICE void issue_qk(float (&s)[kBlockN / 2], int stage) const {
    const tile::u64 q_descriptor = tile::make_smem_descriptor_k_major_sw128(
        smem + Traits::kSmem.q_offset + group * kSm90WarpgroupRows * kSm90RowBytes);
    const tile::u64 k_descriptor = tile::make_smem_descriptor(
        smem + Traits::kSmem.k_offset + stage * Traits::kSmem.k_stage_bytes, 16u,
        kv_layout.template group_bytes<kKPanels>(), tile::SmemSwizzle::bytes128);
#pragma unroll
    for (int step = 0; step < kQSteps; ++step) {
      const int panel = step / kSlicesPerPanel;
      const int within = (step % kSlicesPerPanel) * 32;
      const tile::u64 q_slice =
          tile::advance_smem_descriptor(q_descriptor, panel * Traits::kQPanelBytes + within);
      const tile::u64 k_slice =
          tile::advance_smem_descriptor(k_descriptor, panel * kv_layout.panel_bytes() + within);
      if constexpr (kFp8) {
        tile::wgmma_m64k32_ss<kBlockN, T, T>(s, q_slice, k_slice, step > 0);
      } else {
        tile::wgmma_m64k16_ss<kBlockN, T>(s, q_slice, k_slice, step > 0);
      }
    }
  }

  // O += P V for the V block in `stage` (issued, not waited for).
  TILEFMHA_DEVICE void issue_pv(float (&o)[Traits::kHdimV / 2], const tile::u32 (&p)[kKeySteps][4],
                                int stage) const {
    if constexpr (kFp8) {
      // The transposed tile: hdim_v rows of the block's 128 keys, K-major like K in Q K^T.
      const tile::u64 vt_descriptor = tile::make_smem_descriptor_k_major_sw128(
          smem + Traits::kSmem.vt_offset + stage * Traits::kSmem.v_stage_bytes);
#pragma unroll
      for (int step = 0; step < kKeySteps; ++step) {
        tile::wgmma_m64k32_rs<Traits::kHdimV, tile::float_e4m3_t, T>(
            o, p[step], tile::advance_smem_descriptor(vt_descriptor, step * 32), true);
      }
    } else {
      // MN-major: the leading byte offset steps panels, the stride byte offset 8-key groups.
      const tile::u64 v_descriptor = tile::make_smem_descriptor(
          smem + Traits::kSmem.v_offset + stage * Traits::kSmem.v_stage_bytes,
          kv_layout.panel_bytes(), kv_layout.template group_bytes<kVPanels>(),
          tile::SmemSwizzle::bytes128);
#pragma unroll
      for (int step = 0; step < kKeySteps; ++step) {
        tile::wgmma_m64k16_rs<Traits::kHdimV, T, 1>(
            o, p[step],
            tile::advance_smem_descriptor(v_descriptor,
                                          kv_layout.template row_offset<kVPanels>(16 * step)),
            true);
      }
    }
  }

  // Paged K/V: the last block of a sequence holds, past its keys, whatever the page's other
  // slots hold (stale or never-written cache). Their probabilities are 0, but 0 x NaN is NaN in
  // P V, so the warpgroup zeroes those V rows before reading the block (both warpgroups write
  // the same zeros, so their writes never conflict). K needs nothing: the mask replaces the
  // scores of keys past the sequence by -inf.
  TILEFMHA_DEVICE void clear_v_past_keys(int stage, int key_begin, int len_k) const {
    // FP8: the transposer writes zeros for those keys instead.
    if constexpr (Traits::kPaged && !kFp8) {
      const int valid = len_k - key_begin;
      if (valid >= kBlockN) return;
      constexpr int kChunksPerRow = kSm90RowBytes / 16;
      const int rows = kBlockN - valid;
      const int chunks = rows * kChunksPerRow * (Traits::kHdimV / kSm90PanelElements);
      const tile::u32 base = smem + Traits::kSmem.v_offset + stage * Traits::kSmem.v_stage_bytes;
      for (int chunk = thread; chunk < chunks; chunk += kSm90WarpgroupThreads) {
        const int panel = chunk / (rows * kChunksPerRow);
        const int within = chunk % (rows * kChunksPerRow);
        // A swizzle moves 16-byte chunks within their 128-byte row, never across rows, so a
        // row's bytes are zeroed whatever the pattern.
        const tile::u32 address =
            base + panel * kv_layout.panel_bytes() +
            kv_layout.template row_offset<kVPanels>(valid + within / kChunksPerRow) +
            (within % kChunksPerRow) * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(address), "r"(0u)
                     : "memory");
      }
      // The wgmma reads shared memory through the async proxy.
      tile::fence_proxy_async_shared();
      tile::named_barrier_sync(kSm90EpilogueBarrier + group, kSm90WarpgroupThreads);
    }
  }

  // f(x, r, offset) on every element of a block of S: x by reference, r its accumulator row
  // (0 or 1), offset its column minus chunk_column(0), a compile-time 8j + e.
  template <class F>
  TILEFMHA_DEVICE static void for_each_element(float (&s)[kBlockN / 2], F&& f) {
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int e = 0; e < 2; ++e) f(s[4 * j + 2 * r + e], r, 8 * j + e);
      }
    }
  }

  // Logits hook and mask (an Sm90ElementMask) on a block of S; returns the scale the softmax
  // must still apply.
  // `CheckMask` false: the caller knows the block crosses no mask boundary.
  template <bool CheckMask = true, class Mask, class Logits>
  TILEFMHA_DEVICE float transform(float (&s)[kBlockN / 2], int m_begin, int key_begin,
                                  const Mask& mask, const Logits& logits, float scale_log2) const {
    if constexpr (!Traits::kFusedScale) {
      for_each_element(s, [&](float& x, int r, int offset) {
        x = logits(x, m_begin + tile_row(r), key_begin + chunk_column(0) + offset);
      });
    }
    // Only blocks that cross a mask boundary (the diagonal, the sequence end) pay for it; the
    // right side compares the compile-time offset with a per-row limit.
    if (CheckMask && mask.block_crosses_high(key_begin, kBlockN)) {
      const int limit[2] = {mask.last_visible(0, key_begin) - chunk_column(0),
                            mask.last_visible(1, key_begin) - chunk_column(0)};
      for_each_element(s, [&](float& x, int r, int offset) {
        x = offset <= limit[r] ? x : sm90_negative_infinity();
      });
    }
    if (CheckMask && mask.block_crosses_low(key_begin, kBlockN)) {
      for_each_element(s, [&](float& x, int r, int offset) {
        x = mask.visible_low(r, key_begin + chunk_column(0) + offset) ? x
                                                                      : sm90_negative_infinity();
      });
    }
    return Traits::kFusedScale ? scale_log2 : 1.0f;
  }

  // Dropout on the numerators, after the row sums took them (the 1 / (1 - p) scale waits for
  // the epilogue); coordinates are sequence-relative like the reference's.
  template <class Dropout>
  TILEFMHA_DEVICE void drop(float (&s)[kBlockN / 2], int m_begin, int key_begin,
                            const Dropout& dropout) const {
    if constexpr (Dropout::kEnabled) {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          dropout.apply_pair(s[4 * j + 2 * r], s[4 * j + 2 * r + 1], m_begin + tile_row(r),
                             key_begin + 8 * j + chunk_column(0));
        }
      }
    }
  }

  // P (unnormalized probabilities in S's registers) as the A fragments of P V: the k16 slice
  // `step` covers S chunks 2*step and 2*step + 1. FP8: the k32 slice `step` covers chunks
  // 4*step..4*step+3; register q holds row q % 2's elements of chunks 4*step + 2*(q/2) and the
  // next, so its A columns 4t..4t+3 (+16) carry keys 2t, 2t+1, 2t+8, 2t+9 (+16) of the slice,
  // the order in which the transposer lays the keys out (fwd_sm90_transpose.h).
  // `keep` false (an fp8 block whose V descale is 0) packs zeros.
  TILEFMHA_DEVICE static void pack_p(const float (&s)[kBlockN / 2], tile::u32 (&p)[kKeySteps][4],
                                     bool keep) {
    if constexpr (kFp8) {
#pragma unroll
      for (int step = 0; step < kKeySteps; ++step) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int j = 4 * step + 2 * (q / 2);
          const int r = q % 2;
          p[step][q] = tile::pack_e4m3x4(s[4 * j + 2 * r], s[4 * j + 2 * r + 1],
                                         s[4 * (j + 1) + 2 * r], s[4 * (j + 1) + 2 * r + 1]);
          if (!keep) p[step][q] = 0u;
        }
      }
    } else {
#pragma unroll
      for (int step = 0; step < kKeySteps; ++step) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          p[step][q] = tile::pack2<T>(s[8 * step + 2 * q], s[8 * step + 2 * q + 1]);
        }
      }
    }
  }

  // The V tile of `stage` is ready: landed (16-bit), or transposed (fp8); and free again.
  TILEFMHA_DEVICE void wait_v(int stage, tile::u32 phase) const {
    tile::mbarrier_wait(kFp8 ? barriers.vt_full(stage) : barriers.v_full(stage), phase);
  }
  TILEFMHA_DEVICE void release_v(int stage) const {
    release(kFp8 ? barriers.vt_empty(stage) : barriers.v_empty(stage));
  }

  // O's rows times their factors. Once a row's maximum settles, its softmax correction is
  // exactly 1 block after block: a warp whose 16 rows all have factor 1 skips the multiplies
  // (exact either way). That pays where O is wide (H100, 16k tokens: bf16 hdim 128 +2-10%, fp8
  // +2%) and costs where it is narrow (hdim 64: -3%, the vote outweighs 32 multiplies).
  // TILEFMHA_RESCALE_ALWAYS (an NVRTC -D define) turns the test off, for measuring it.
  TILEFMHA_DEVICE static void rescale(float (&o)[Traits::kHdimV / 2], const float (&c)[2]) {
#if !defined(TILEFMHA_RESCALE_ALWAYS)
    if constexpr (Traits::kHdimV >= 128) {
      if (!__any_sync(0xFFFFFFFFu, c[0] != 1.0f || c[1] != 1.0f)) return;
    }
#endif
#pragma unroll
    for (int j = 0; j < Traits::kHdimV / 8; ++j) {
      o[4 * j + 0] *= c[0];
      o[4 * j + 1] *= c[0];
      o[4 * j + 2] *= c[1];
      o[4 * j + 3] *= c[1];
    }
  }

  // The latency timeline's points (tile/timeline.h), from the first consumer thread.
  TILEFMHA_DEVICE void stamp(tile::TimelinePoint point) const {
    if (group == 0 && thread == 0) tile::timeline_stamp(point);
  }

  // The last warpgroup opens the first turn; warpgroup 0 takes the matching extra turn after
  // its last tile, so every arrival on a turn barrier is consumed.
  TILEFMHA_DEVICE void open_turns() const {
    if constexpr (Traits::kPingpong) {
      if (group == Traits::kConsumerGroups - 1)
        tile::named_barrier_arrive(kSm90TurnBarrier + 0, kTurnThreads);
    }
  }
  TILEFMHA_DEVICE void close_turns() const {
    if constexpr (Traits::kPingpong) {
      if (group == 0) tile::named_barrier_sync(kSm90TurnBarrier + 0, kTurnThreads);
    }
  }

  // One tile's main loop. `step_base` counts the key blocks of the CTA's earlier tiles (ring
  // positions continue across tiles); `q_phase` is the parity of this tile's Q load.
  // `blocks`: KeyBlocks, or Sm90SplitKeyBlocks in split-KV mode.
  // `descaler`: fp8 dequantization (a no-op for 16-bit inputs).
  template <class Blocks, class Mask, class Logits, class Dropout>
  TILEFMHA_DEVICE void run(Sm90ConsumerState<Traits>& state, const Blocks& blocks, int m_begin,
                           const Mask& mask, const Logits& logits, const Dropout& dropout,
                           const Sm90Descaler<Traits>& descaler, float scale_log2, int step_base,
                           tile::u32 q_phase, int len_k) const {
    constexpr int kStages = Traits::kStages;
    float(&o)[Traits::kHdimV / 2] = state.o;
#pragma unroll
    for (int i = 0; i < Traits::kHdimV / 2; ++i) o[i] = 0.0f;
    if constexpr (Traits::kSplitKv) {
      if (blocks.count() == 0) return;  // an empty split: the producer loads no Q for it
    }
    tile::mbarrier_wait(barriers.q_full(), q_phase);
    stamp(tile::kTimelineQLanded);

    const int steps = blocks.count();
    if (steps == 0) release_q_after(-1, 0);  // a tile that sees no key never reads Q
    float s[kBlockN / 2];
    tile::u32 p[kKeySteps][4];
    float correction[2];
    auto stage_of = [&](int step) { return ring_stage<kStages>(step_base + step); };
    auto phase_of = [&](int step) { return ring_phase<kStages>(step_base + step); };
    auto key_begin_of = [&](int step) { return blocks.block(step) * kBlockN; };
    // Dequantized scores, the logits hooks and mask, the softmax and dropout of block `step`;
    // returns whether its P V adds anything (fp8: false where the block's V descale is 0).
    // `check_mask`: Sm90CheckMask<false> where the block crosses no mask boundary.
    auto softmax_step = [&](int step, auto check_mask) {
      descaler.template scores<kBlockN>(s, blocks.block(step));
      const float scale = transform<decltype(check_mask)::value>(s, m_begin, key_begin_of(step),
                                                                 mask, logits, scale_log2);
      state.softmax.update(s, scale, correction);
      drop(s, m_begin, key_begin_of(step), dropout);
      return descaler.template enter_v_block<kBlockN>(s, blocks.block(step), state.v_unit,
                                                      correction);
    };

    if constexpr (!Traits::kOverlap) {
      for (int step = 0; step < steps; ++step) {
        const int stage = stage_of(step);
        tile::mbarrier_wait(barriers.k_full(stage), phase_of(step));
        tile::wgmma_fence();
        issue_qk(s, stage);
        tile::wgmma_commit_group();
        tile::wgmma_wait_group<0>();
        tile::wgmma_fence_registers(s);
        release(barriers.k_empty(stage));
        release_q_after(step, steps);

        const bool keep = softmax_step(step, Sm90CheckMask<true>{});
        rescale(o, correction);
        pack_p(s, p, keep);

        wait_v(stage, phase_of(step));
        clear_v_past_keys(stage, key_begin_of(step), len_k);
        tile::wgmma_fence();
        issue_pv(o, p, stage);
        tile::wgmma_commit_group();
        tile::wgmma_wait_group<0>();
        tile::wgmma_fence_registers(o);
        release_v(stage);
      }
    } else if (steps > 0) {
      // Block 0: S alone.
      tile::mbarrier_wait(barriers.k_full(stage_of(0)), phase_of(0));
      stamp(tile::kTimelineFirstK);
      wait_turn();
      tile::wgmma_fence();
      issue_qk(s, stage_of(0));
      tile::wgmma_commit_group();
      pass_turn();
      tile::wgmma_wait_group<0>();
      tile::wgmma_fence_registers(s);
      stamp(tile::kTimelineFirstS);
      release(barriers.k_empty(stage_of(0)));
      release_q_after(0, steps);
      pack_p(s, p, softmax_step(0, Sm90CheckMask<true>{}));

      for (int step = 1; step < steps; ++step) {
        // S(step) and O += P(step-1) V(step-1) in flight together.
        const int k_stage = stage_of(step);
        const int v_stage = stage_of(step - 1);
        tile::mbarrier_wait(barriers.k_full(k_stage), phase_of(step));
        wait_v(v_stage, phase_of(step - 1));
        clear_v_past_keys(v_stage, key_begin_of(step - 1), len_k);
        wait_turn();
        tile::wgmma_fence();
        issue_qk(s, k_stage);
        tile::wgmma_commit_group();
        issue_pv(o, p, v_stage);
        tile::wgmma_commit_group();
        pass_turn();

        tile::wgmma_wait_group<1>();
        tile::wgmma_fence_registers(s);
        release(barriers.k_empty(k_stage));
        release_q_after(step, steps);
        // The softmax runs under this warpgroup's own P V. With one consumer warpgroup, ptxas
        // waited for that P V at the join after the mask's branch, above the softmax; an arm
        // per case, each ending in its own wait, keeps them apart (H100, bf16 hdim 128 64x128
        // tile, 16k tokens: 397 -> 460 TFLOP/s). Where two warpgroups take turns (each one's
        // softmax under the other's GEMMs), the one body measured as fast or faster (fp8 hdim
        // 128 786 against 780, bf16 hdim 64 575 against 555).
        auto softmax_under_pv = [&](auto check_mask) {
          const bool keep = softmax_step(step, check_mask);
          tile::wgmma_wait_group<0>();
          tile::wgmma_fence_registers(o);
          release_v(v_stage);
          rescale(o, correction);
          pack_p(s, p, keep);
        };
        const int key_begin = key_begin_of(step);
        if (Traits::kConsumerGroups > 1 || mask.block_crosses_high(key_begin, kBlockN) |
                                               mask.block_crosses_low(key_begin, kBlockN))
          softmax_under_pv(Sm90CheckMask<true>{});
        else
          softmax_under_pv(Sm90CheckMask<false>{});
      }

      // Last block: O += P V alone.
      const int last = steps - 1;
      wait_v(stage_of(last), phase_of(last));
      stamp(tile::kTimelineLastV);
      clear_v_past_keys(stage_of(last), key_begin_of(last), len_k);
      wait_turn();
      tile::wgmma_fence();
      issue_pv(o, p, stage_of(last));
      tile::wgmma_commit_group();
      pass_turn();
      tile::wgmma_wait_group<0>();
      tile::wgmma_fence_registers(o);
      stamp(tile::kTimelineLastPv);
      release_v(stage_of(last));
    }
  }
};

}  // namespace tilefmha::fmha
