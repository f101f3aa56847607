// Append-KV (family fwd_appendkv, pipeline appendkv): writes the new K (rotated by RoPE when
// asked) and V tokens into a contiguous or paged cache at key seqlen_k[b] + t, and rotates Q in
// place, in one launch, exactly as reference::append_kv (rotation in fp32 instead of double).
// Memory-bound, so the layout serves the loads:
//   * one "row" is one (token, head) of K, V or Q; the launch's rows are the K rows, then the V
//     rows, then the Q rows, so one 1-D grid covers all three;
//   * a row is shared by kLanes adjacent lanes of one warp, each holding every kLanes-th chunk of
//     16 bytes, so a row's lanes move whole contiguous segments in 16-byte accesses (element by
//     element where a pointer, stride or head dim does not allow it);
//   * chunks move as raw bytes: only the dims RoPE rotates are widened to fp32, rotated and
//     rounded back (fp8: round to nearest even, saturating, as numeric::store), so V, unrotated
//     K and the dims past rotary_dim are byte copies, and an fp8 cache (one per-tensor scale
//     shared with the new tokens and Q, so rotating codes is rotating values) is moved as codes;
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
  using Element = Element_;  // float, tile::half_t, tile::bfloat16_t or an fp8 code type
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
                    tile::same_type<Element, tile::bfloat16_t>::value ||
                    tile::is_fp8<Element>::value,
                "append-KV moves fp32, fp16, bf16 or fp8");
#if !defined(TILEFMHA_HAS_SM89)
  static_assert(!tile::is_fp8<Element>::value,
                "fp8 append-KV needs sm_89 or newer (cvt to and from e4m3x2 / e5m2x2)");
#endif
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

// 16 bytes of a row as in memory: 16 / sizeof(T) elements of T, element e in the bits of word
// e * sizeof(T) / 4 that its bytes occupy.
struct Chunk {
  tile::u32 word[4];
};

template <class T>
constexpr int kElementBits = 8 * int(sizeof(T));

// Storage bits of a value of T and back (fp32 as its IEEE bits, so NaN payloads survive).
template <class T>
TILEFMHA_DEVICE tile::u32 bits_of(T value) {
  if constexpr (tile::same_type<T, float>::value) {
    return tile::float_as_bits(value);
  } else {
    return tile::u32(value.bits);
  }
}

template <class T>
TILEFMHA_DEVICE T from_bits(tile::u32 bits) {
  if constexpr (tile::same_type<T, float>::value) {
    return tile::bits_as_float(bits);
  } else if constexpr (tile::is_fp8<T>::value) {
    return T{static_cast<unsigned char>(bits)};
  } else {
    return T{static_cast<tile::u16>(bits)};
  }
}

// Element e of a chunk (e is a compile-time index once the loops unroll, so these are register
// shifts and masks).
template <class T>
TILEFMHA_DEVICE tile::u32 element(const Chunk& chunk, int e) {
  constexpr int kBits = kElementBits<T>;
  if constexpr (kBits == 32) {
    return chunk.word[e];
  } else {
    constexpr int kPerWord = 32 / kBits;
    return (chunk.word[e / kPerWord] >> (e % kPerWord * kBits)) & ((1u << kBits) - 1);
  }
}

template <class T>
TILEFMHA_DEVICE void set_element(Chunk& chunk, int e, tile::u32 bits) {
  constexpr int kBits = kElementBits<T>;
  if constexpr (kBits == 32) {
    chunk.word[e] = bits;
  } else {
    constexpr int kPerWord = 32 / kBits;
    const int shift = e % kPerWord * kBits;
    const tile::u32 mask = ((1u << kBits) - 1) << shift;
    chunk.word[e / kPerWord] = (chunk.word[e / kPerWord] & ~mask) | ((bits << shift) & mask);
  }
}

template <class T>
TILEFMHA_DEVICE float widen(const Chunk& chunk, int e) {
  return tile::to_float(from_bits<T>(element<T>(chunk, e)));
}

// Rotated values of elements e and e + 1, rounded to T: one conversion per pair.
template <class T>
TILEFMHA_DEVICE void narrow_pair(Chunk& chunk, int e, float lo, float hi) {
  if constexpr (tile::same_type<T, float>::value) {
    set_element<T>(chunk, e, tile::float_as_bits(lo));
    set_element<T>(chunk, e + 1, tile::float_as_bits(hi));
  } else {
    const tile::u32 pair = tile::pack_pair<T>(lo, hi);
    set_element<T>(chunk, e, pair);
    set_element<T>(chunk, e + 1, pair >> kElementBits<T>);
  }
}

// The chunk at `source`: one 16-byte load, or its first `valid` elements one by one (the rest
// zero).
template <class T, int Vector>
TILEFMHA_DEVICE void load_chunk(const T* source, bool vector, int valid, Chunk& out) {
  if (vector) {
    const uint4 raw = *reinterpret_cast<const uint4*>(source);
    out.word[0] = raw.x;
    out.word[1] = raw.y;
    out.word[2] = raw.z;
    out.word[3] = raw.w;
  } else {
    out = Chunk{{0, 0, 0, 0}};
#pragma unroll
    for (int e = 0; e < Vector; ++e)
      if (e < valid) set_element<T>(out, e, bits_of(source[e]));
  }
}

template <class T, int Vector>
TILEFMHA_DEVICE void store_chunk(T* target, bool vector, int valid, const Chunk& in) {
  if (vector) {
    *reinterpret_cast<uint4*>(target) = make_uint4(in.word[0], in.word[1], in.word[2], in.word[3]);
  } else {
#pragma unroll
    for (int e = 0; e < Vector; ++e)
      if (e < valid) target[e] = from_bits<T>(element<T>(in, e));
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

// The half-rotated partners of chunk `d`'s dims below rotary_dim (dim f pairs with
// f + rotary_dim / 2): one 16-byte load when the half is a multiple of the chunk (the partner
// chunk then lies wholly on the other side), else element by element.
template <class Traits>
TILEFMHA_DEVICE void load_partners(const Row<typename Traits::Element>& row, int d, int rotary,
                                   Chunk& out) {
  using T = typename Traits::Element;
  constexpr int kVector = Traits::kVector;
  const int half = rotary / 2;
  if (row.vector && half % kVector == 0) {
    load_chunk<T, kVector>(row.source + (d < half ? d + half : d - half), true, kVector, out);
    return;
  }
  out = Chunk{{0, 0, 0, 0}};
#pragma unroll
  for (int e = 0; e < kVector; ++e) {
    const int index = d + e;
    if (index < rotary && index < row.dim)
      set_element<T>(out, e, bits_of(row.source[index < half ? index + half : index - half]));
  }
}

// Dim `index` of a half-rotated row: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), x2 the upper half.
TILEFMHA_DEVICE float rotate_half(const AppendKvParams& p, long long position, int index, float x,
                                  float partner) {
  const int half = int(p.rotary_dim) / 2;
  float cosine, sine;
  rope_angle(p, position, index < half ? index : index - half, cosine, sine);
  return index < half ? x * cosine - partner * sine : x * cosine + partner * sine;
}

// Rotates chunk `d`'s dims below rotary_dim in place: widened to fp32, rotated, rounded back to
// the element type a pair at a time. rotary_dim and every chunk start are even, so a pair lies
// wholly below rotary_dim or wholly past it (and interleaved pairs (2f, 2f + 1) in one chunk).
template <class Traits>
TILEFMHA_DEVICE void rotate_chunk(const AppendKvParams& p, long long position, int d, Chunk& x,
                                  const Chunk& partner) {
  using T = typename Traits::Element;
  const int rotary = int(p.rotary_dim);
#pragma unroll
  for (int e = 0; e < Traits::kVector; e += 2) {
    const int index = d + e;
    if (index >= rotary) continue;
    const float x1 = widen<T>(x, e), x2 = widen<T>(x, e + 1);
    float lo, hi;
    if constexpr (Traits::kRope == RopeMode::half_rotated) {
      lo = rotate_half(p, position, index, x1, widen<T>(partner, e));
      hi = rotate_half(p, position, index + 1, x2, widen<T>(partner, e + 1));
    } else {
      float cosine, sine;
      rope_angle(p, position, index / 2, cosine, sine);
      lo = x1 * cosine - x2 * sine;
      hi = x2 * cosine + x1 * sine;
    }
    narrow_pair<T>(x, e, lo, hi);
  }
}

template <class Traits>
TILEFMHA_DEVICE void move_row(const AppendKvParams& p, const Row<typename Traits::Element>& row,
                              bool active, int lane) {
  using T = typename Traits::Element;
  constexpr int kVector = Traits::kVector;
  constexpr int kLanes = Traits::kLanes;
  constexpr bool kRotates = Traits::kRope != RopeMode::none;
  constexpr bool kHalf = Traits::kRope == RopeMode::half_rotated;
  const int rotary = int(p.rotary_dim);

  // Zeroed only so that no path reads an unset chunk in the compiler's eyes (the guards below
  // skip the chunks a lane does not load); the stores fold away.
  Chunk x[Traits::kChunksPerLane] = {};
  Chunk partner[kHalf ? Traits::kChunksPerLane : 1] = {};
#pragma unroll
  for (int c = 0; c < Traits::kChunksPerLane; ++c) {
    const int d = (c * kLanes + lane) * kVector;
    if (!active || d >= row.dim) continue;
    load_chunk<T, kVector>(row.source + d, row.vector, row.dim - d, x[c]);
    if constexpr (kHalf) {
      if (row.rotate && d < rotary) load_partners<Traits>(row, d, rotary, partner[c]);
    }
  }
  // Q rotates in place: a partner another lane of this warp writes must be read first.
  if constexpr (kHalf) __syncwarp();

#pragma unroll
  for (int c = 0; c < Traits::kChunksPerLane; ++c) {
    const int d = (c * kLanes + lane) * kVector;
    if (!active || d >= row.dim) continue;
    if constexpr (kRotates) {
      if (row.rotate && d < rotary)
        rotate_chunk<Traits>(p, row.position, d, x[c], partner[kHalf ? c : 0]);
    }
    store_chunk<T, kVector>(row.target + d, row.vector, row.dim - d, x[c]);
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
