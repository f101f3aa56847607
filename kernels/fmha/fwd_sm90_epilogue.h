// A consumer warpgroup's epilogue: normalize O by the softmax totals (and, for fp8 inputs, V's
// descale), merge it into the state O and LSE hold when the problem accumulates, write it as
// 16-bit values into its 64 rows of the O tile (its own buffer, or the now free Q tile, in
// passes where O is wider than Q) in the swizzled panel layout, then store it to global memory,
// and write LSE. Batch mode stores with TMA, whose box clipping drops rows past
// the sequence end; group mode packs sequences back to back, so there the rows go out through
// guarded 16-byte stores instead of clipping into the next sequence. Where O shares the Q
// buffer, the warpgroup then releases it for the CTA's next tile.
#pragma once

#include "fmha/fwd_sm90_consumer.h"
#include "fmha/fwd_sm90_params.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_scheduler.h"
#include "fmha/fwd_sm90_traits.h"
#include "fmha/logits.h"
#include "fmha/seq_info.h"
#include "tile/async_proxy.h"
#include "tile/named_barrier.h"
#include "tile/tma.h"
#include "tile/vector_io.h"

namespace tilefmha::fmha {

TILEFMHA_DEVICE void sm90_store_shared_u32(tile::u32 address, tile::u32 value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

// FP8: O was accumulated in units of a V descale (Sm90Descaler); the normalizer applies it.
template <class Traits>
TILEFMHA_DEVICE void sm90_apply_v_unit(const Sm90ConsumerState<Traits>& state,
                                       float (&normalizer)[2]) {
  if constexpr (Traits::kFp8) {
    normalizer[0] *= state.v_unit;
    normalizer[1] *= state.v_unit;
  }
}

// Accumulate (Problem::accumulate): O and LSE already hold a state of these rows over other keys.
// Merges this tile's normalized O and its LSE into it, in the accumulators' layout (row
// tile_row(r), columns 8j + 2 (thread % 4) + {0, 1}), before O leaves through shared memory:
//   LSE' = log(e^LSE + e^LSE_new),  O' = e^(LSE - LSE') O + e^(LSE_new - LSE') O_new.
// A state of LSE -inf carries no weight and its O is not read (it may hold anything); rows of
// neither state get O = 0, LSE = -inf; a NaN in either LSE reaches O and LSE. The tile's own
// stores of these rows come after the loads, and no other CTA touches them.
template <class Traits>
TILEFMHA_DEVICE void sm90_merge_previous_state(const FwdParams& p, const SeqInfo& seq,
                                               const Sm90Tile& tile_id,
                                               const Sm90TileRows<Traits>& tile_rows,
                                               const Sm90Consumer<Traits>& consumer,
                                               Sm90ConsumerState<Traits>& state, float (&lse)[2]) {
  using T = typename Traits::Output;
  constexpr int kDv = Traits::kHdimV;
  constexpr float kLn2 = 0.6931471805599453f;
  const float none = sm90_negative_infinity();
  const int column = 2 * (consumer.thread % 4);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int tile_row = consumer.tile_row(r);
    const int i = tile_rows.position(tile_row);
    if (i >= seq.len_q) continue;
    const int head = tile_rows.head(tile_id.head, tile_row);
    const long long row = seq.q_start + i;
    const float previous = p.lse[seq.view_batch * p.lse_batch_stride + head * p.lse_head_stride +
                                 row * p.lse_seq_stride];
    const float top = tile::max_f32(previous, lse[r]);
    const float previous_weight =
        previous == none ? 0.0f : tile::exp2_approx((previous - top) * kLog2e);
    const float new_weight = lse[r] == none ? 0.0f : tile::exp2_approx((lse[r] - top) * kLog2e);
    const float total = previous_weight + new_weight;
    const bool empty = top == none;
    const float keep = empty ? 0.0f : previous_weight / total;
    const float take = empty ? 0.0f : new_weight / total;
    lse[r] = empty ? none : top + tile::log2_approx(total) * kLn2;
    const T* previous_o = static_cast<const T*>(p.o) + seq.view_batch * p.o_strides.batch +
                          head * p.o_strides.head + row * p.o_strides.seq;
#pragma unroll
    for (int j = 0; j < kDv / 8; ++j) {
      float& low = state.o[4 * j + 2 * r];
      float& high = state.o[4 * j + 2 * r + 1];
      low *= take;
      high *= take;
      const int d = 8 * j + column;
      if (keep != 0.0f && d < p.hdim_v) {  // NaN != 0: a NaN weight reaches O
        float previous_low, previous_high;
        tile::unpack2<T>(*reinterpret_cast<const tile::u32*>(previous_o + d), previous_low,
                         previous_high);
        low += keep * previous_low;
        high += keep * previous_high;
      }
    }
  }
}

template <class Traits>
TILEFMHA_DEVICE void sm90_epilogue(const Sm90FwdParams& params, const SeqInfo& seq,
                                   const Sm90Tile& tile_id, const Sm90Consumer<Traits>& consumer,
                                   Sm90ConsumerState<Traits>& state, float softmax_scale,
                                   float keep_scale) {
  using T = typename Traits::Output;
  constexpr int kDv = Traits::kHdimV;
  const FwdParams& p = params.base;
  const int thread = consumer.thread;
  const int group = consumer.group;
  const Sm90TileRows<Traits> tile_rows(p, tile_id.m_block);

  float normalizer[2], lse[2];
  float sink2 = 0.0f;
  if constexpr (Traits::kSinkLogit) sink2 = p.sink_logits[tile_id.head * p.sink_stride] * kLog2e;
  state.softmax.template finish<Traits::kSinkLogit>(softmax_scale, sink2, keep_scale, normalizer,
                                                    lse);
  sm90_apply_v_unit<Traits>(state, normalizer);
  Sm90Consumer<Traits>::rescale(state.o, normalizer);
  if constexpr (Traits::kAccumulate)
    sm90_merge_previous_state<Traits>(p, seq, tile_id, tile_rows, consumer, state, lse);

  // Registers -> swizzled shared tile (this warpgroup's rows of every panel) -> global memory,
  // in passes of o_pass_panels panels where O is wider than the Q buffer it shares. Before a
  // pass writes the buffer, the O that left it before (the previous tile's in its own buffer,
  // the previous pass's in Q's) must have been read out: by the TMA store (only its issuing
  // thread can wait for that) or by every thread's guarded copy.
  constexpr int kOPanels = (kDv + kSm90PanelElements - 1) / kSm90PanelElements;
  constexpr int kPassPanels = Traits::kSmem.o_pass_panels;
  constexpr int kPasses = kOPanels / kPassPanels;
  static_assert(kPasses * kPassPanels == kOPanels, "O's panels split into equal passes");
  const tile::u32 o_tile = consumer.smem + Traits::kSmem.o_offset;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int first_chunk = pass * kPassPanels * 8;  // of the row's 8-column chunks
    if (Traits::kSmem.separate_o() || pass > 0) {
      if constexpr (!Traits::kGroupMode) {
        if (thread == 0) tile::tma_store_wait_group_read<0>();
      }
      tile::named_barrier_sync(kSm90EpilogueBarrier + group, kSm90WarpgroupThreads);
    }
#pragma unroll
    for (int pass_chunk = 0; pass_chunk < kPassPanels * 8; ++pass_chunk) {
      const int j = first_chunk + pass_chunk;
      if (j >= kDv / 8) break;
      const int panel = pass_chunk / 8;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = consumer.tile_row(r);
        const tile::u32 address = o_tile + panel * Traits::kQPanelBytes +
                                  sm90_swizzled_offset(row, j % 8) + 4 * (thread % 4);
        sm90_store_shared_u32(address,
                              tile::pack2<T>(state.o[4 * j + 2 * r], state.o[4 * j + 2 * r + 1]));
      }
    }

    // First query position of this warpgroup's rows, sequence-relative.
    const int group_row = tile_rows.position(group * kSm90WarpgroupRows);
    if constexpr (!Traits::kGroupMode) {
      tile::fence_proxy_async_shared();  // the TMA store reads what ordinary stores wrote
      tile::named_barrier_sync(kSm90EpilogueBarrier + group, kSm90WarpgroupThreads);
      if (thread == 0 && group_row < seq.len_q) {
        const tile::TensorMap* o_map = reinterpret_cast<const tile::TensorMap*>(&params.o_map);
#pragma unroll
        for (int panel = 0; panel < kPassPanels; ++panel) {
          const int column_panel = pass * kPassPanels + panel;
          if (column_panel >= kDv / kSm90PanelElements) break;
          const tile::u32 source =
              o_tile + panel * Traits::kQPanelBytes + group * kSm90WarpgroupRows * kSm90RowBytes;
          const int row = int(seq.q_start) + group_row;
          if constexpr (Traits::kPackGqa) {
            // 64 rows = 64 / g query positions of the g heads: one 5D box per panel.
            tile::tma_store_5d(o_map, source, column_panel * kSm90PanelElements, 0, tile_id.head,
                               row, int(seq.view_batch));
          } else {
            tile::tma_store_4d(o_map, source, column_panel * kSm90PanelElements, row, tile_id.head,
                               int(seq.view_batch));
          }
        }
        tile::tma_store_commit_group();
      }
    } else {
      tile::named_barrier_sync(kSm90EpilogueBarrier + group, kSm90WarpgroupThreads);
      constexpr int kRowChunks = kDv / 8 < kPassPanels * 8 ? kDv / 8 : kPassPanels * 8;
      T* o = static_cast<T*>(p.o) + seq.view_batch * p.o_strides.batch +
             tile_id.head * p.o_strides.head;
#pragma unroll 4
      for (int index = thread; index < kSm90WarpgroupRows * kRowChunks;
           index += kSm90WarpgroupThreads) {
        const int row = index / kRowChunks;
        const int chunk = index % kRowChunks;
        if (group_row + row >= seq.len_q) break;  // rows only grow with index
        // A padded kernel's tile is wider than the problem's head dim (a multiple of 8, which the
        // dispatcher's match rule guarantees): its extra columns are not stored.
        if ((first_chunk + chunk) * 8 >= p.hdim_v) continue;
        tile::u32 value[4];
        tile::load_shared_v4(o_tile + (chunk / 8) * Traits::kQPanelBytes +
                                 sm90_swizzled_offset(group * kSm90WarpgroupRows + row, chunk % 8),
                             value);
        T* destination =
            o + (seq.q_start + group_row + row) * p.o_strides.seq + (first_chunk + chunk) * 8;
        tile::store_global_v4(destination, value);
      }
    }
  }

  if constexpr (Traits::kStoreLse) {
    if (thread % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = tile_rows.position(consumer.tile_row(r));
        const int head = tile_rows.head(tile_id.head, consumer.tile_row(r));
        if (i < seq.len_q) {
          p.lse[seq.view_batch * p.lse_batch_stride + head * p.lse_head_stride +
                (seq.q_start + i) * p.lse_seq_stride] = lse[r];
        }
      }
    }
  }

  // Where O shares the Q buffer, that buffer is free for the next tile once this warpgroup's O
  // has left it: the TMA store has read it (batch mode) or the guarded stores have (group mode,
  // where the next Q's TMA writes follow ordinary shared-memory accesses).
  if constexpr (Traits::kSmem.separate_o()) {
    return;
  } else if constexpr (!Traits::kGroupMode) {
    if (thread == 0) tile::tma_store_wait_group_read<0>();
  } else {
    tile::fence_proxy_async_shared();
  }
  consumer.release(consumer.barriers.q_empty());
}

TILEFMHA_DEVICE void sm90_store_global_v2(float* address, float x, float y) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(address), "f"(x), "f"(y) : "memory");
}

// The split-KV epilogue: the split's O, normalized by its own softmax sum (no sink logit, no
// dropout), goes as fp32 straight from the accumulators to o_acc [split, view batch, head,
// seq, dim]: the 4 threads of a quad hold 8 adjacent columns of a row, 32 contiguous bytes, so
// the stores fill whole sectors without a pass through shared memory (and the problem needs no
// O view or map). LSE goes to lse_acc; a split that saw no key of a row writes O = 0 and
// LSE = -inf (the softmax's finish gives a zero normalizer), never NaN. Rows past the sequence
// end are skipped; packed GQA rows map to (position, head) as Sm90TileRows says.
template <class Traits>
TILEFMHA_DEVICE void sm90_split_epilogue(const FwdParams& p, const SeqInfo& seq,
                                         const Sm90Tile& tile_id,
                                         const Sm90Consumer<Traits>& consumer,
                                         Sm90ConsumerState<Traits>& state, float softmax_scale) {
  float normalizer[2], lse[2];
  state.softmax.template finish<false>(softmax_scale, 0.0f, 1.0f, normalizer, lse);
  sm90_apply_v_unit<Traits>(state, normalizer);
  const Sm90TileRows<Traits> tile_rows(p, tile_id.m_block);
  float* const o_split =
      p.o_acc + tile_id.split * p.o_acc_split_stride + seq.view_batch * p.o_acc_batch_stride;
  float* const lse_split =
      p.lse_acc + tile_id.split * p.lse_acc_split_stride + seq.view_batch * p.lse_acc_batch_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int tile_row = consumer.tile_row(r);
    const int i = tile_rows.position(tile_row);
    if (i >= seq.len_q) continue;
    const long long head = tile_rows.head(tile_id.head, tile_row);
    const long long token = seq.q_start + i;
    float* const row = o_split + head * p.o_acc_head_stride + token * p.o_acc_seq_stride;
#pragma unroll
    for (int j = 0; j < Traits::kHdimV / 8; ++j) {
      const int column = 8 * j + consumer.chunk_column(0);
      // A padded kernel's extra columns (past the problem's head dim) are not stored.
      if (column < p.hdim_v) {
        sm90_store_global_v2(row + column, state.o[4 * j + 2 * r] * normalizer[r],
                             state.o[4 * j + 2 * r + 1] * normalizer[r]);
      }
    }
    if (consumer.thread % 4 == 0)
      lse_split[head * p.lse_acc_head_stride + token * p.lse_acc_seq_stride] = lse[r];
  }
}

// Before the CTA exits (its shared memory goes away), the TMA stores of O that each warpgroup's
// issuing thread left in flight must have read their source. (Split-KV stores no O by TMA.)
template <class Traits>
TILEFMHA_DEVICE void sm90_epilogue_drain(const Sm90Consumer<Traits>& consumer) {
  if constexpr (Traits::kSmem.separate_o() && !Traits::kGroupMode && !Traits::kSplitKv) {
    if (consumer.thread == 0) tile::tma_store_wait_group_read<0>();
  }
}

}  // namespace tilefmha::fmha
