// Append-KV (family fwd_appendkv, pipeline appendkv): writes the new K (rotated by RoPE when
// asked) and V tokens into a contiguous or paged cache at key seqlen_k[b] + t, and rotates Q in
// place, in one launch, exactly as reference::append_kv (rotation in fp32 instead of double).
// Memory-bound, so the layout serves the loads:
//   * one "row" is one (token, head) of K, V or Q; the launch's rows are the K rows, then the V
//     rows, then the Q rows, so one 1-D grid covers all three;
//   * a row is shared by kLanes adjacent lanes of one warp, each holding every kLanes-th chunk of
//     16 bytes, so a row's lanes move whole contiguous segments in 16-byte accesses (element by
//     element where a pointer, stride or head dim does not allow it);
//   * half-rotated RoPE pairs dim f with f + rotary_dim / 2, which another lane may hold: every
//     lane reads its chunks and their partners before any lane of the warp writes, which keeps
//     the in-place rotation of Q race-free;
//   * block 0 also writes seqlen_k[b] + seqlen_knew for an attention stage that follows.
#pragma once

#include "fmha/appendkv_params.h"
#include "tile/device.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

template <class Element_, int Hdim, int Warps, bool Paged, RopeMode Rope>
struct AppendKvTraits {
  using Element = Element_;  // float, tile::half_t or tile::bfloat16_t
  static constexpr int kVector = 16 / int(sizeof(Element));
  static constexpr int kChunksPerRow = (Hdim + kVector - 1) / kVector;
  // The smallest power of two of lanes covering a row's chunks, at most a warp.
  static constexpr int lanes_for(int chunks) {
    int lanes = 1;
    while (lanes < chunks && lanes < 32) lanes *= 2;
    return lanes;
  }
  static constexpr int kLanes = lanes_for(kChunksPerRow);
  static constexpr int kChunksPerLane = (kChunksPerRow + kLanes - 1) / kLanes;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kRowsPerCta = kThreads / kLanes;
  static constexpr bool kPaged = Paged;
  static constexpr RopeMode kRope = Rope;

  static_assert(tile::same_type<Element, float>::value ||
                    tile::same_type<Element, tile::half_t>::value ||
                    tile::same_type<Element, tile::bfloat16_t>::value,
                "append-KV moves fp32, fp16 or bf16");
  static_assert(kLanes * kChunksPerLane >= kChunksPerRow, "a row's lanes cover its chunks");
};

namespace appendkv {

// Whether a [.., dim] view moves in 16-byte chunks: aligned base, strides and head dim multiples
// of the chunk.
template <int Vector>
TILEFMHA_DEVICE bool vectorizable(const void* data, const TokenStrides& s, long long dim) {
  return reinterpret_cast<unsigned long long>(data) % 16 == 0 &&
         ((s.batch | s.seq | s.head | dim) % Vector) == 0;
}

template <class T, int Vector>
TILEFMHA_DEVICE void load_chunk(const T* source, bool vector, int valid, float (&out)[Vector]) {
  if (vector) {
    const uint4 raw = *reinterpret_cast<const uint4*>(source);
    if constexpr (tile::same_type<T, float>::value) {
      out[0] = __uint_as_float(raw.x);
      out[1] = __uint_as_float(raw.y);
      out[2] = __uint_as_float(raw.z);
      out[3] = __uint_as_float(raw.w);
    } else {
      tile::unpack2<T>(raw.x, out[0], out[1]);
      tile::unpack2<T>(raw.y, out[2], out[3]);
      tile::unpack2<T>(raw.z, out[4], out[5]);
      tile::unpack2<T>(raw.w, out[6], out[7]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < Vector; ++e) out[e] = e < valid ? tile::to_float(source[e]) : 0.0f;
  }
}

template <class T, int Vector>
TILEFMHA_DEVICE void store_chunk(T* target, bool vector, int valid, const float (&in)[Vector]) {
  if (vector) {
    uint4 raw;
    if constexpr (tile::same_type<T, float>::value) {
      raw = make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]),
                       __float_as_uint(in[3]));
    } else {
      raw = make_uint4(tile::pack2<T>(in[0], in[1]), tile::pack2<T>(in[2], in[3]),
                       tile::pack2<T>(in[4], in[5]), tile::pack2<T>(in[6], in[7]));
    }
    *reinterpret_cast<uint4*>(target) = raw;
  } else {
#pragma unroll
    for (int e = 0; e < Vector; ++e)
      if (e < valid) target[e] = tile::from_float<T>(in[e]);
  }
}

// cos and sin of frequency f at `position`: from the tables, or from the base with the angle in
// double (fp32 angles lose ~position * 2^-24 radians, visible at long contexts).
TILEFMHA_DEVICE void rope_angle(const AppendKvParams& p, long long position, int f, float& c,
                                float& s) {
  if (p.rope_cos != nullptr) {
    c = p.rope_cos[position * p.rope_cos_stride + f];
    s = p.rope_sin[position * p.rope_sin_stride + f];
    return;
  }
  // theta^(-2f / rotary_dim) as rope_ratio^f by squaring (at most 8 multiplies for f < 256),
  // where a double exp2 per element cost most of the time.
  double frequency = 1.0, power = p.rope_ratio;
  for (int e = f; e > 0; e >>= 1) {
    if (e & 1) frequency *= power;
    power *= power;
  }
  // The angle is formed and reduced to [-pi, pi] in double, then its sine and cosine taken by
  // the hardware's approximations (abs error ~4e-7 on that range; sincosf would keep a slow path
  // for large arguments on the stack): a double sincos per element held the RoPE append to ~20%
  // of copy bandwidth (H100).
  constexpr double kTwoPi = 6.283185307179586;
  const double angle = double(position) * frequency;
  const double turns = rint(angle * (1.0 / kTwoPi));
  __sincosf(float(fma(-turns, kTwoPi, angle)), &s, &c);
}

// What one row moves: source and destination (equal for Q), its head dim, whether it rotates
// and at which RoPE position.
template <class T>
struct Row {
  const T* source;
  T* target;
  int dim;
  bool vector;
  bool rotate;
  long long position;
};

template <class Traits>
TILEFMHA_DEVICE void move_row(const AppendKvParams& p, const Row<typename Traits::Element>& row,
                              bool active, int lane) {
  using T = typename Traits::Element;
  constexpr int kVector = Traits::kVector;
  constexpr int kLanes = Traits::kLanes;
  constexpr bool kHalf = Traits::kRope == RopeMode::half_rotated;
  const int rotary = int(p.rotary_dim);
  const int half = rotary / 2;

  float x[Traits::kChunksPerLane][kVector];
  float partner[kHalf ? Traits::kChunksPerLane : 1][kVector];
#pragma unroll
  for (int c = 0; c < Traits::kChunksPerLane; ++c) {
    const int d = (c * kLanes + lane) * kVector;
    if (!active || d >= row.dim) continue;
    load_chunk<T, kVector>(row.source + d, row.vector, row.dim - d, x[c]);
    if constexpr (kHalf) {
      if (row.rotate && d < rotary) {
        // A chunk lies wholly below rotary_dim when its half is a multiple of the chunk.
        if (row.vector && half % kVector == 0) {
          load_chunk<T, kVector>(row.source + (d < half ? d + half : d - half), true, kVector,
                                 partner[c]);
        } else {
#pragma unroll
          for (int e = 0; e < kVector; ++e) {
            const int index = d + e;
            partner[c][e] =
                index < rotary && index < row.dim
                    ? tile::to_float(row.source[index < half ? index + half : index - half])
                    : 0.0f;
          }
        }
      }
    }
  }
  // Q rotates in place: a partner another lane of this warp writes must be read first.
  if constexpr (kHalf) __syncwarp();

#pragma unroll
  for (int c = 0; c < Traits::kChunksPerLane; ++c) {
    const int d = (c * kLanes + lane) * kVector;
    if (!active || d >= row.dim) continue;
    float out[kVector];
#pragma unroll
    for (int e = 0; e < kVector; ++e) out[e] = x[c][e];
    if constexpr (Traits::kRope != RopeMode::none) {
      if (row.rotate && d < rotary) {
#pragma unroll
        for (int e = 0; e < kVector; ++e) {
          const int index = d + e;
          if (index >= rotary) continue;
          float cosine, sine;
          if constexpr (kHalf) {
            rope_angle(p, row.position, index < half ? index : index - half, cosine, sine);
            // (x1, x2) -> (x1 c - x2 s, x2 c + x1 s) with x2 the upper half.
            out[e] = index < half ? x[c][e] * cosine - partner[c][e] * sine
                                  : x[c][e] * cosine + partner[c][e] * sine;
          } else {
            // Pairs (2f, 2f + 1) lie inside one chunk: chunks start at even dims.
            rope_angle(p, row.position, index / 2, cosine, sine);
            out[e] = (e % 2 == 0) ? x[c][e] * cosine - x[c][e + 1] * sine
                                  : x[c][e] * cosine + x[c][e - 1] * sine;
          }
        }
      }
    }
    store_chunk<T, kVector>(row.target + d, row.vector, row.dim - d, out);
  }
}

// Element offset of cache key `key` of sequence b, head h.
template <bool Paged>
TILEFMHA_DEVICE long long cache_offset(const AppendKvParams& p, const TokenStrides& s, long long b,
                                       long long key, long long h) {
  if constexpr (Paged) {
    const long long first = p.page_indptr != nullptr ? p.page_indptr[b] : b * p.page_table_stride;
    const long long page = p.page_table[first + key / p.page_size];
    return page * s.batch + (key % p.page_size) * s.seq + h * s.head;
  } else {
    return b * s.batch + key * s.seq + h * s.head;
  }
}

}  // namespace appendkv

template <class Traits>
TILEFMHA_DEVICE void append_kv(const AppendKvParams& p) {
  using T = typename Traits::Element;
  constexpr int kVector = Traits::kVector;
  const int lane = int(threadIdx.x) % Traits::kLanes;
  const long long row_index =
      (long long)blockIdx.x * Traits::kRowsPerCta + threadIdx.x / Traits::kLanes;

  if (blockIdx.x == 0 && p.seqlen_k_after != nullptr) {
    for (long long b = threadIdx.x; b < p.batch; b += Traits::kThreads)
      p.seqlen_k_after[b] = p.seqlen_k[b] + p.seqlen_knew;
  }

  // Lanes past the last row still reach the warp barrier in move_row, with nothing to move.
  const long long kv_rows = 2 * p.k_rows;
  const bool active = row_index < kv_rows + p.q_rows;
  appendkv::Row<T> row{nullptr, nullptr, 0, false, false, 0};
  if (active && row_index < kv_rows) {
    const bool is_k = row_index < p.k_rows;
    const long long r = is_k ? row_index : row_index - p.k_rows;
    const long long h = r % p.nhead_k;
    const long long bt = r / p.nhead_k;
    const long long t = bt % p.seqlen_knew;
    const long long b = bt / p.seqlen_knew;
    const long long key = p.seqlen_k[b] + t;
    const TokenStrides& from = is_k ? p.k_new_strides : p.v_new_strides;
    const TokenStrides& to = is_k ? p.k_strides : p.v_strides;
    const void* source = is_k ? p.k_new : p.v_new;
    void* target = is_k ? p.k : p.v;
    row.dim = int(is_k ? p.hdim_q : p.hdim_v);
    row.source = static_cast<const T*>(source) + b * from.batch + t * from.seq + h * from.head;
    row.target = static_cast<T*>(target) + appendkv::cache_offset<Traits::kPaged>(p, to, b, key, h);
    // Paged rows are as aligned as the pool's page, slot and head strides.
    row.vector = appendkv::vectorizable<kVector>(source, from, row.dim) &&
                 appendkv::vectorizable<kVector>(target, to, row.dim);
    row.rotate = is_k;
    row.position = key + (p.position_offsets != nullptr ? p.position_offsets[b] : 0);
  } else if (active) {
    const long long r = row_index - kv_rows;
    const long long h = r % p.nhead_q;
    const long long bi = r / p.nhead_q;
    const long long i = bi % p.seqlen_q;
    const long long b = bi / p.seqlen_q;
    T* q =
        static_cast<T*>(p.q) + b * p.q_strides.batch + i * p.q_strides.seq + h * p.q_strides.head;
    row.dim = int(p.hdim_q);
    row.source = q;
    row.target = q;
    row.vector = appendkv::vectorizable<kVector>(p.q, p.q_strides, row.dim);
    row.rotate = true;
    row.position = p.seqlen_k[b] + i + (p.position_offsets != nullptr ? p.position_offsets[b] : 0);
  }
  appendkv::move_row<Traits>(p, row, active, lane);
}

}  // namespace tilefmha::fmha
