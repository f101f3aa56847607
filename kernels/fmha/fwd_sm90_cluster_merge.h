// Split-KV with the combine inside the split kernel: the splits of one tile run as one thread
// block cluster (rank r = split r; fwd_sm90_scheduler.h numbers them so), and instead of fp32
// partials in global memory and a second kernel, each CTA stages its split's normalized O and
// LSE in its own shared memory (the K/V rings, free once its last P V is done), the cluster
// syncs, and the CTAs merge the tile's rows between them, reading every split's partial of a
// row through distributed shared memory, then write O and LSE. The merge is the combine's
// (fmha/splitkv_combine.h): weights exp(lse_s - max), the sink logit once in the denominator,
// a split that saw no key (LSE -inf) skipped, a row that saw none writing O = 0, LSE = -inf.
// It saves a b=1 decode the combine's launch, its wait and two round trips through L2.
#pragma once

#include "fmha/fwd_sm90_consumer.h"
#include "fmha/fwd_sm90_epilogue.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_traits.h"
#include "fmha/seq_info.h"
#include "fmha/splitkv_combine.h"
#include "tile/cluster.h"
#include "tile/named_barrier.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

// Named barrier of the consumer warpgroups: all of them are past their last P V before any
// stages its partial in the rings another may still be reading.
constexpr tile::u32 kSm90ClusterMergeBarrier = kSm90EpilogueBarrier + kSm90MaxConsumerGroups;

// The staging area at the start of the K/V rings: the tile's rows of fp32 O (rows padded by 4
// floats, so that a quad's 8 columns of 8 rows fall into different banks and a row's float4s
// stay aligned), then one LSE per row.
template <class Traits>
struct Sm90MergeArea {
  static constexpr int kRowFloats = Traits::kHdimV + 4;
  static constexpr int kOBytes = Traits::kBlockM * kRowFloats * 4;
  static constexpr int kBytes = kOBytes + Traits::kBlockM * 4;
  static constexpr int kRingsBytes = Traits::kSmem.vt_offset +
                                     Traits::kStages * Traits::kSmem.v_stage_bytes -
                                     Traits::kSmem.k_offset;
  static_assert(kBytes <= kRingsBytes, "the tile's partial O and LSE fit in the K/V rings");

  tile::u32 base;  // this CTA's shared-window address of the area

  TILEFMHA_DEVICE tile::u32 o(int row, int column) const {
    return base + tile::u32((row * kRowFloats + column) * 4);
  }
  TILEFMHA_DEVICE tile::u32 lse(int row) const { return base + tile::u32(kOBytes + row * 4); }
};

// This consumer thread's rows of the split's O, normalized by the split's own softmax sum, and
// their LSE (natural log; -inf with O = 0 where the split saw no key), into the staging area.
template <class Traits>
TILEFMHA_DEVICE void sm90_stage_split_partial(const Sm90Consumer<Traits>& consumer,
                                              Sm90ConsumerState<Traits>& state, float softmax_scale,
                                              const Sm90MergeArea<Traits>& area) {
  float normalizer[2], lse[2];
  state.softmax.template finish<false>(softmax_scale, 0.0f, 1.0f, normalizer, lse);
  sm90_apply_v_unit<Traits>(state, normalizer);
  if constexpr (Traits::kConsumerGroups > 1)
    tile::named_barrier_sync(kSm90ClusterMergeBarrier,
                             Traits::kConsumerGroups * kSm90WarpgroupThreads);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = consumer.tile_row(r);
#pragma unroll
    for (int j = 0; j < Traits::kHdimV / 8; ++j) {
      const tile::u32 address = area.o(row, 8 * j + consumer.chunk_column(0));
      const float low = state.o[4 * j + 2 * r] * normalizer[r];
      const float high = state.o[4 * j + 2 * r + 1] * normalizer[r];
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address), "f"(low), "f"(high)
                   : "memory");
    }
    if (consumer.thread % 4 == 0)
      asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(area.lse(row)), "f"(lse[r]) : "memory");
  }
}

// After the cluster's first sync: rows rank, rank + splits, ... of the tile, a warp per row
// (`thread` counts the CTA's consumer threads), each lane holding float4s of the row.
template <class Traits>
TILEFMHA_DEVICE void sm90_cluster_merge_rows(const FwdParams& p, const SeqInfo& seq,
                                             const Sm90Tile& tile_id,
                                             const Sm90MergeArea<Traits>& area, int thread) {
  using Output = typename Traits::Output;
  constexpr int kWarps = Traits::kConsumerGroups * kSm90WarpgroupThreads / 32;
  constexpr int kChunks = (Traits::kHdimV + 127) / 128;
  constexpr int kBatch = kSm90ClusterMergeBatch;
  const int splits = p.num_splits;  // the cluster's size: at most kSm90MaxClusterSplits
  const int rank = int(tile::cluster_cta_rank());
  const int warp = thread / 32;
  const int lane = thread % 32;
  const Sm90TileRows<Traits> tile_rows(p, tile_id.m_block);
  const int hdim = int(p.hdim_v);
  const bool vector_out = combine::vectorizable<Output>(p.o, p.o_strides.batch, p.o_strides.seq,
                                                        p.o_strides.head, 0, p.hdim_v);
  const float none = combine::negative_infinity();
  for (int row = rank + splits * warp; row < Traits::kBlockM; row += splits * kWarps) {
    const int i = tile_rows.position(row);
    if (i >= seq.len_q) continue;
    const int head = tile_rows.head(tile_id.head, row);
    // Every split's LSE (lane s holds split s's) and the first batch of partial rows are
    // requested before any is used: one round trip through the cluster up to kBatch splits, two
    // beyond (a batch's rows take 4 x kChunks registers each).
    const float split_lse =
        lane < splits ? tile::cluster_load_f32(tile::cluster_map_shared(area.lse(row), lane))
                      : none;
    float values[kBatch][kChunks][4];
    auto load_batch = [&](int first) {
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int column = (c * 32 + lane) * 4;
          if (first + u < splits && column < Traits::kHdimV)
            tile::cluster_load_v4(tile::cluster_map_shared(area.o(row, column), first + u),
                                  values[u][c]);
          else
            values[u][c][0] = values[u][c][1] = values[u][c][2] = values[u][c][3] = 0.0f;
        }
      }
    };
    load_batch(0);
    // The sink logit enters first, as one more term of the denominator with no partial. Split
    // kernels carry neither the sink logit nor the LSE output as traits (the combine's, in
    // two-stage plans), so both follow the parameters.
    const bool sink = p.sink_logits != nullptr;
    float max_lse = sink ? p.sink_logits[head * p.sink_stride] : none;
    float sum = sink ? 1.0f : 0.0f;
    const float new_max = tile::max_f32(max_lse, tile::warp_max(split_lse));
    const float rescale = max_lse == none ? 0.0f : combine::exp_approx(max_lse - new_max);
    const float weight = split_lse == none ? 0.0f : combine::exp_approx(split_lse - new_max);
    sum = sum * rescale + tile::warp_sum(weight);
    max_lse = new_max;
    float acc[kChunks][4] = {};
#pragma unroll
    for (int first = 0; first < kSm90MaxClusterSplits; first += kBatch) {
      if (first >= splits) break;
      if (first > 0) load_batch(first);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const float w = __shfl_sync(0xffffffffu, weight, first + u);
        if (first + u < splits && w != 0.0f) {  // a skipped split cannot inject NaN
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[c][e] += w * values[u][c][e];
          }
        }
      }
    }
    // A NaN sum (a split whose LSE or partial was NaN) must reach O and LSE, as in the forward.
    const bool any = !(sum <= 0.0f);
    const float factor = any ? 1.0f / sum : 0.0f;
    Output* out = static_cast<Output*>(p.o) + seq.view_batch * p.o_strides.batch +
                  (seq.q_start + i) * p.o_strides.seq + head * p.o_strides.head;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int column = (c * 32 + lane) * 4;
      if (column < hdim) {
        float merged[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) merged[e] = acc[c][e] * factor;
        combine::store4(out + column, vector_out, hdim - column, merged);
      }
    }
    if (p.lse != nullptr && lane == 0)
      p.lse[seq.view_batch * p.lse_batch_stride + head * p.lse_head_stride +
            (seq.q_start + i) * p.lse_seq_stride] =
          any ? max_lse + tile::log2_approx(sum) * combine::kLn2 : none;
  }
}

}  // namespace tilefmha::fmha
