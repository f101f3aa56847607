// The split-KV combine (family fwd_splitkv_combine, pipeline combine): merges the partial O and
// LSE of every split into O and LSE, adding the sink logit once (exactly as
// reference::splitkv_combine, in fp32). Memory-bound, so the layout serves the loads:
//   * a CTA owns block_m consecutive rows of the flattened (batch, head, seq) order, seq
//     fastest, which is the partials' contiguous order; a row is shared by kThreadsPerRow
//     adjacent lanes of one warp, each holding every kThreadsPerRow-th 4-element vector of it,
//     so a row's lanes read whole contiguous segments;
//   * each row's LSEs are read once, in passes of up to block_n splits staged in shared memory;
//     across passes the running max rescales the sum and the accumulators (the online softmax
//     of the forward, over splits), so any split count works with a fixed tile;
//   * a split whose weight is 0 (LSE -inf: it saw no key, and its partial may be garbage) is
//     skipped, never multiplied, so it cannot inject NaN; a row with no finite LSE and no sink
//     logit writes O = 0 and LSE = -inf;
//   * 16-byte (fp32) or 8-byte (16-bit) vector loads and stores when the pointers, strides and
//     head dim allow, else element by element.
// The kernel is mode-agnostic: group mode is batch 1 with the packed tokens as rows.
#pragma once

#include "fmha/combine_params.h"
#include "tile/device.h"
#include "tile/fast_math.h"
#include "tile/grid_dependency.h"
#include "tile/numeric_types.h"
#include "tile/timeline.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

template <class Output_, int HdimV, int BlockM, int BlockN, int Warps, bool StoreLse,
          bool SinkLogit>
struct CombineTraits {
  using Output = Output_;  // O's element type: float, tile::half_t or tile::bfloat16_t
  static constexpr int kBlockM = BlockM;
  static constexpr int kSplitsPerPass = BlockN;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kThreadsPerRow = kThreads / BlockM;
  static constexpr int kVector = 4;
  // Vectors per thread: the head dim rounded up to whole strides of the row's lanes.
  static constexpr int kChunks =
      (HdimV + kVector * kThreadsPerRow - 1) / (kVector * kThreadsPerRow);
  // Splits whose partial loads are issued together (accumulate_pass): about 64 registers of
  // loaded values. The arch data gives a row a warp or half of one, so a row is one or two
  // vectors a lane and a decode's splits (up to ~16) arrive in one round trip. Wide rows on few
  // lanes keep one: at hdim 256 on 8 lanes two in flight, or one body per partial type, spilled
  // under sm_90a's 128-register cap.
  static constexpr int kSplitsInFlight =
      kChunks == 1 ? 16 : (kChunks == 2 ? 8 : (kChunks <= 6 ? 2 : 1));
  static constexpr bool kStoreLse = StoreLse;
  static constexpr bool kSinkLogit = SinkLogit;

  static_assert(tile::same_type<Output, float>::value ||
                    tile::same_type<Output, tile::half_t>::value ||
                    tile::same_type<Output, tile::bfloat16_t>::value,
                "the combine writes fp32, fp16 or bf16");
  static_assert(kThreadsPerRow >= 1 && kThreadsPerRow <= 32 &&
                    kThreadsPerRow * BlockM == kThreads &&
                    (kThreadsPerRow & (kThreadsPerRow - 1)) == 0,
                "a row's lanes must be a power-of-two part of one warp");
  static_assert(BlockN >= 1, "block_n is the splits staged per pass");
};

namespace combine {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

TILEFMHA_DEVICE float negative_infinity() {
  return tile::bits_as_float(0xFF800000u);
}

// exp(x) with exp(-inf) = 0.
TILEFMHA_DEVICE float exp_approx(float x) {
  return tile::exp2_approx(x * kLog2e);
}

// Reductions over the Lanes adjacent lanes that share a row (an aligned group of the warp).
template <int Lanes>
TILEFMHA_DEVICE float row_max(float value) {
#pragma unroll
  for (int mask = Lanes / 2; mask >= 1; mask /= 2)
    value = tile::max_f32(value, tile::shuffle_xor(value, mask));
  return value;
}

template <int Lanes>
TILEFMHA_DEVICE float row_sum(float value) {
#pragma unroll
  for (int mask = Lanes / 2; mask >= 1; mask /= 2) value += tile::shuffle_xor(value, mask);
  return value;
}

// Four consecutive elements as floats: one vector load, or element by element up to `valid`.
template <class T>
TILEFMHA_DEVICE void load4(const T* source, bool vector, int valid, float (&out)[4]) {
  if (vector) {
    if constexpr (tile::same_type<T, float>::value) {
      const float4 v = *reinterpret_cast<const float4*>(source);
      out[0] = v.x;
      out[1] = v.y;
      out[2] = v.z;
      out[3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(source);
      tile::unpack2<T>(v.x, out[0], out[1]);
      tile::unpack2<T>(v.y, out[2], out[3]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) out[e] = e < valid ? tile::to_float(source[e]) : 0.0f;
  }
}

template <class T>
TILEFMHA_DEVICE void store4(T* target, bool vector, int valid, const float (&in)[4]) {
  if (vector) {
    if constexpr (tile::same_type<T, float>::value) {
      *reinterpret_cast<float4*>(target) = make_float4(in[0], in[1], in[2], in[3]);
    } else {
      *reinterpret_cast<uint2*>(target) =
          make_uint2(tile::pack2<T>(in[0], in[1]), tile::pack2<T>(in[2], in[3]));
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (e < valid) target[e] = tile::from_float<T>(in[e]);
  }
}

// Whether a [.., dim] view moves in 4-element vectors: aligned base, every stride and the head
// dim multiples of 4 elements.
template <class T>
TILEFMHA_DEVICE bool vectorizable(const void* data, long long s0, long long s1, long long s2,
                                  long long s3, long long hdim) {
  const unsigned long long alignment = 4 * sizeof(T);
  return reinterpret_cast<unsigned long long>(data) % alignment == 0 &&
         ((s0 | s1 | s2 | s3 | hdim) & 3) == 0;
}

// One split's partial row (elements of type T) as floats, this lane's vectors only.
template <class Traits, class T>
TILEFMHA_DEVICE void load_partial(const T* partial, bool vector, int lane, int hdim,
                                  float (&values)[Traits::kChunks][Traits::kVector]) {
#pragma unroll
  for (int c = 0; c < Traits::kChunks; ++c) {
    const int d = (c * Traits::kThreadsPerRow + lane) * Traits::kVector;
    if (d < hdim) {
      load4(partial + d, vector, hdim - d, values[c]);
    } else {
#pragma unroll
      for (int e = 0; e < Traits::kVector; ++e) values[c][e] = 0.0f;
    }
  }
}

// acc += weight * one split's partial row (elements of type T), this lane's vectors only.
template <class Traits, class T>
TILEFMHA_DEVICE void accumulate_split(const void* o_acc, long long offset, bool vector, int lane,
                                      int hdim, float weight,
                                      float (&acc)[Traits::kChunks][Traits::kVector]) {
  const T* partial = static_cast<const T*>(o_acc) + offset;
#pragma unroll
  for (int c = 0; c < Traits::kChunks; ++c) {
    const int d = (c * Traits::kThreadsPerRow + lane) * Traits::kVector;
    if (d < hdim) {
      float values[Traits::kVector];
      load4(partial + d, vector, hdim - d, values);
#pragma unroll
      for (int e = 0; e < Traits::kVector; ++e) acc[c][e] += weight * values[e];
    }
  }
}

// acc += weights[s] * partial s for the `count` splits of one pass (elements of type T). The
// partials were just written and sit in L2, so the time goes into round trips: the loads of up
// to kInFlight splits are issued before any of them is used, the last batch of a pass too (a
// decode's 15 splits are one batch, not 15 dependent loads). A split of weight 0 (LSE -inf) is
// loaded but never multiplied: its partial may hold anything, NaN included, and every split's
// rows lie inside the partials' allocation.
template <class Traits, class T>
TILEFMHA_DEVICE void accumulate_pass(const void* o_acc, long long offset, long long split_stride,
                                     int count, const float* weights, bool vector, int lane,
                                     int hdim, float (&acc)[Traits::kChunks][Traits::kVector]) {
  constexpr int kInFlight = Traits::kSplitsInFlight;
  const T* partial = static_cast<const T*>(o_acc) + offset;
  for (int s = 0; s < count; s += kInFlight) {
    float values[kInFlight][Traits::kChunks][Traits::kVector];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      // Past the pass's end nothing is loaded and nothing used (its weight is 0 below).
      load_partial<Traits>(partial + (s + u) * split_stride, vector, lane, s + u < count ? hdim : 0,
                           values[u]);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const float weight = s + u < count ? weights[s + u] : 0.0f;
      if (weight == 0.0f) continue;
#pragma unroll
      for (int c = 0; c < Traits::kChunks; ++c) {
#pragma unroll
        for (int e = 0; e < Traits::kVector; ++e) acc[c][e] += weight * values[u][c][e];
      }
    }
  }
}

template <class Traits>
TILEFMHA_DEVICE void combine_rows(const CombineParams& p,
                                  float (*staged)[Traits::kSplitsPerPass + 1]) {
  using Output = typename Traits::Output;
  constexpr int kLanes = Traits::kThreadsPerRow;
  constexpr int kPass = Traits::kSplitsPerPass;
  constexpr int kVector = Traits::kVector;

  const int local_row = threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  float* weights = staged[local_row];

  const long long rows = p.batch * p.nhead * p.seqlen;
  const long long row = (long long)blockIdx.x * Traits::kBlockM + local_row;
  // Lanes of rows past the end still join the shuffles, with nothing to merge.
  const bool active = row < rows;
  long long b = 0, h = 0, i = 0;
  if (active) {
    i = row % p.seqlen;
    const long long bh = row / p.seqlen;
    h = bh % p.nhead;
    b = bh / p.nhead;
  }
  const float* lse_acc =
      p.lse_acc + b * p.lse_acc_batch_stride + h * p.lse_acc_head_stride + i * p.lse_acc_seq_stride;
  const long long o_acc_row =
      b * p.o_acc_batch_stride + h * p.o_acc_head_stride + i * p.o_acc_seq_stride;
  const ScalarKind kind = p.o_acc_kind;
  const bool vector_in =
      kind == ScalarKind::fp32
          ? vectorizable<float>(p.o_acc, p.o_acc_split_stride, p.o_acc_batch_stride,
                                p.o_acc_head_stride, p.o_acc_seq_stride, p.hdim_v)
          : vectorizable<tile::half_t>(p.o_acc, p.o_acc_split_stride, p.o_acc_batch_stride,
                                       p.o_acc_head_stride, p.o_acc_seq_stride, p.hdim_v);
  const int hdim = int(p.hdim_v);

  float acc[Traits::kChunks][kVector];
#pragma unroll
  for (int c = 0; c < Traits::kChunks; ++c) {
#pragma unroll
    for (int e = 0; e < kVector; ++e) acc[c][e] = 0.0f;
  }
  // The running max and sum of exp(lse - max) over the splits seen; the sink logit enters
  // first, as one more term of the denominator with no partial.
  float max_lse = negative_infinity();
  float sum = 0.0f;
  if constexpr (Traits::kSinkLogit) {
    max_lse = p.sink_logits[h * p.sink_stride];
    sum = 1.0f;
  }

  for (long long pass_begin = 0; pass_begin < p.num_splits; pass_begin += kPass) {
    const long long left = p.num_splits - pass_begin;
    const int count = left < kPass ? int(left) : kPass;
    float pass_max = negative_infinity();
    for (int s = lane; s < count; s += kLanes) {
      const float lse =
          active ? lse_acc[(pass_begin + s) * p.lse_acc_split_stride] : negative_infinity();
      weights[s] = lse;
      pass_max = tile::max_f32(pass_max, lse);
    }
    pass_max = row_max<kLanes>(pass_max);
    const float new_max = tile::max_f32(max_lse, pass_max);
    // Nothing finite yet (max_lse -inf) has nothing to rescale; -inf - -inf would be NaN.
    const float rescale = max_lse == negative_infinity() ? 0.0f : exp_approx(max_lse - new_max);
    float pass_sum = 0.0f;
    for (int s = lane; s < count; s += kLanes) {
      const float lse = weights[s];
      const float weight = lse == negative_infinity() ? 0.0f : exp_approx(lse - new_max);
      weights[s] = weight;
      pass_sum += weight;
    }
    sum = sum * rescale + row_sum<kLanes>(pass_sum);
    max_lse = new_max;
#pragma unroll
    for (int c = 0; c < Traits::kChunks; ++c) {
#pragma unroll
      for (int e = 0; e < kVector; ++e) acc[c][e] *= rescale;
    }
    __syncwarp();  // the row's weights, written by its other lanes, are visible

    const long long offset = o_acc_row + pass_begin * p.o_acc_split_stride;
    const long long stride = p.o_acc_split_stride;
    if constexpr (Traits::kSplitsInFlight > 1) {
      // A uniform branch per pass: one batched body per partial type.
      switch (kind) {
        case ScalarKind::fp32:
          accumulate_pass<Traits, float>(p.o_acc, offset, stride, count, weights, vector_in, lane,
                                         hdim, acc);
          break;
        case ScalarKind::fp16:
          accumulate_pass<Traits, tile::half_t>(p.o_acc, offset, stride, count, weights, vector_in,
                                                lane, hdim, acc);
          break;
        case ScalarKind::bf16:
          accumulate_pass<Traits, tile::bfloat16_t>(p.o_acc, offset, stride, count, weights,
                                                    vector_in, lane, hdim, acc);
          break;
      }
    } else {
      for (int s = 0; s < count; ++s) {
        const float weight = weights[s];
        if (weight == 0.0f) continue;
        // A uniform branch per split: one body for every partial type keeps the accumulators'
        // registers.
        switch (kind) {
          case ScalarKind::fp32:
            accumulate_split<Traits, float>(p.o_acc, offset + s * stride, vector_in, lane, hdim,
                                            weight, acc);
            break;
          case ScalarKind::fp16:
            accumulate_split<Traits, tile::half_t>(p.o_acc, offset + s * stride, vector_in, lane,
                                                   hdim, weight, acc);
            break;
          case ScalarKind::bf16:
            accumulate_split<Traits, tile::bfloat16_t>(p.o_acc, offset + s * stride, vector_in,
                                                       lane, hdim, weight, acc);
            break;
        }
      }
    }
    __syncwarp();  // every lane is done with the weights before the next pass restages them
  }

  if (!active) return;
  // A NaN sum (a split whose LSE or partial was NaN) must reach O and LSE, as in the forward.
  const bool any = !(sum <= 0.0f);
  const float factor = any ? 1.0f / sum : 0.0f;
  const float lse = any ? max_lse + tile::log2_approx(sum) * kLn2 : negative_infinity();
  Output* out = static_cast<Output*>(p.o) + b * p.o_strides.batch + i * p.o_strides.seq +
                h * p.o_strides.head;
  const bool vector_out =
      vectorizable<Output>(p.o, p.o_strides.batch, p.o_strides.seq, p.o_strides.head, 0, p.hdim_v);
#pragma unroll
  for (int c = 0; c < Traits::kChunks; ++c) {
    const int d = (c * kLanes + lane) * kVector;
    if (d < hdim) {
      float values[kVector];
#pragma unroll
      for (int e = 0; e < kVector; ++e) values[e] = acc[c][e] * factor;
      store4(out + d, vector_out, hdim - d, values);
    }
  }
  if constexpr (Traits::kStoreLse) {
    if (lane == 0)
      p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i * p.lse_seq_stride] = lse;
  }
}

}  // namespace combine

template <class Traits>
TILEFMHA_DEVICE void splitkv_combine(const CombineParams& p) {
  // The +1 column keeps the rows of one warp in different banks.
  __shared__ float staged[Traits::kBlockM][Traits::kSplitsPerPass + 1];
  // Launched behind the split kernel with programmatic dependency on sm_90 (codegen/
  // combine_source.cpp): the partials are complete only once that grid is.
  if (threadIdx.x == 0) tile::timeline_stamp(tile::kTimelineEntry);
  // The next attention call's first grid may launch now and wait on this one's end.
  tile::allow_dependent_grid_launch();
  tile::wait_for_previous_grid();
  if (threadIdx.x == 0) tile::timeline_stamp(tile::kTimelineLoadsIssued);
  combine::combine_rows<Traits>(p, staged);
  if (threadIdx.x == 0) tile::timeline_stamp(tile::kTimelineStored);
  tile::timeline_finish("splitkv_combine", threadIdx.x == 0);
}

}  // namespace tilefmha::fmha
