// Online softmax over wgmma accumulators. A consumer thread holds two rows of its warpgroup's
// 64 (row l/4 and l/4 + 8 of its warp's 16): element e of row r of 8-column chunk j is
// s[4j + 2r + e], and a row's other columns live in the 3 other lanes of the quad, so row
// reductions are two shuffles. Works in base 2: p = exp2(s * c - max * c), with c the folded
// softmax scale (or 1 when the logits were transformed beforehand).
#pragma once

#include "tile/fast_math.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

TILEFMHA_DEVICE float sm90_negative_infinity() {
  return tile::bits_as_float(0xFF800000u);
}

// SkipsPadding: the softmax tracks which row halves hold queries and skips the others (decode
// tiles; prefill kernels compile without it).
template <int Columns, bool SkipsPadding = false>
struct Sm90OnlineSoftmax {
  static constexpr int kChunks = Columns / 8;

  struct Max {
    TILEFMHA_DEVICE static float apply(float a, float b) { return tile::max_f32(a, b); }
  };
  struct Sum {
    TILEFMHA_DEVICE static float apply(float a, float b) { return a + b; }
  };
  // Folds `values` pairwise (any count), leaving the result in values[0]: log2(kChunks)
  // dependent steps instead of kChunks.
  template <class Op>
  TILEFMHA_DEVICE static float tree(float (&values)[kChunks]) {
#if defined(TILEFMHA_SOFTMAX_CHAIN)  // measuring knob (NVRTC -D): the old left-to-right chain
#pragma unroll
    for (int j = 1; j < kChunks; ++j) values[0] = Op::apply(values[0], values[j]);
    return values[0];
#endif
#pragma unroll
    for (int width = 1; width < kChunks; width *= 2) {
#pragma unroll
      for (int j = 0; j + width < kChunks; j += 2 * width)
        values[j] = Op::apply(values[j], values[j + width]);
    }
    return values[0];
  }
  float row_max[2];  // raw (unscaled) running max; -inf while a row has seen nothing
  float row_sum[2];  // this thread's partial sums; quad-reduced at the end
  // Whether any of the warp's 8 rows of accumulator row r is a query (uniform over the warp).
  // A decode tile holds 4-8 query rows of its 64; the others are padding whose results nothing
  // stores, and the softmax skips them (their P stays whatever S held, which reaches only their
  // own rows of O). Kept with SkipsPadding only; otherwise every row counts.
  bool live[2];

  TILEFMHA_DEVICE Sm90OnlineSoftmax() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = sm90_negative_infinity();
      row_sum[r] = 0.0f;
      if constexpr (SkipsPadding) live[r] = true;
    }
  }

  // `query[r]`: whether this thread's row r is one of the tile's queries.
  TILEFMHA_DEVICE void track_rows(const bool (&query)[2]) {
    if constexpr (SkipsPadding) {
#pragma unroll
      for (int r = 0; r < 2; ++r) live[r] = __any_sync(0xFFFFFFFFu, query[r]);
    }
  }

  // Replaces s by its unnormalized probabilities and returns, per row, the factor by which
  // everything accumulated so far must be rescaled. The row's maximum and sum over the block
  // reduce as pairwise trees, not chains: with few warps per scheduler to hide latency, a chain
  // of 32 dependent adds per row stalled the consumers (H100 profile: "wait" the top stall;
  // trees measured bf16 hdim 64 +3.5%, hdim 256 +7%, fp8 +1% at 16k tokens).
  TILEFMHA_DEVICE void update(float (&s)[Columns / 2], float scale, float (&correction)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (SkipsPadding) {
        correction[r] = 1.0f;
        if (!live[r]) continue;
      }
      float partial[kChunks];
#pragma unroll
      for (int j = 0; j < kChunks; ++j)
        partial[j] = tile::max_f32(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]);
      const float block_max = tile::quad_max(tile::max_f32(row_max[r], tree<Max>(partial)));
      // A row with nothing visible keeps max -inf: subtracting 0 keeps exp2 at 0, never NaN.
      const float base = block_max == sm90_negative_infinity() ? 0.0f : block_max * scale;
      correction[r] = tile::exp2_approx(row_max[r] * scale - base);
      row_max[r] = block_max;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        float& x0 = s[4 * j + 2 * r];
        float& x1 = s[4 * j + 2 * r + 1];
        x0 = tile::exp2_approx(x0 * scale - base);
        x1 = tile::exp2_approx(x1 * scale - base);
        partial[j] = x0 + x1;
      }
      row_sum[r] = row_sum[r] * correction[r] + tree<Sum>(partial);
    }
  }

  // Row totals, LSE (natural log) and the factor that normalizes O (0 for an empty row).
  // With Sink, `sink2` is the base-2 sink logit, which joins only the denominator;
  // `keep_scale` folds in the dropout rescaling 1 / (1 - p).
  template <bool Sink>
  TILEFMHA_DEVICE void finish(float scale, float sink2, float keep_scale, float (&normalizer)[2],
                              float (&lse)[2]) const {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float total = tile::quad_sum(row_sum[r]);
      float max2 = row_max[r] * scale;
      float weight = 1.0f;  // share of the keys once the sink joins the denominator
      if constexpr (Sink) {
        const float joint = tile::max_f32(max2, sink2);
        weight = tile::exp2_approx(max2 - joint);
        total = total * weight + tile::exp2_approx(sink2 - joint);
        max2 = joint;
      }
      // A NaN total (a NaN among the logits this row read) counts as "any", so that it
      // reaches O and LSE; only a row that saw no key (total 0) writes O = 0 and LSE = -inf.
      const bool any = !(total <= 0.0f);
      // The approximate reciprocal (1 ulp) spares the IEEE division's slow-path branches.
      normalizer[r] = any ? keep_scale * weight * tile::reciprocal_approx(total) : 0.0f;
      lse[r] = any ? (max2 + tile::log2_approx(total)) * kLn2 : sm90_negative_infinity();
    }
  }
};

}  // namespace tilefmha::fmha
