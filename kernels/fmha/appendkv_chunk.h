// Append-KV's 16-byte chunks (fmha/appendkv.h): a row's bytes as they sit in memory, moved with
// one 16-byte access where the view allows and element by element elsewhere, with access to
// single elements (widened to fp32 for RoPE, rounded back a pair at a time).
#pragma once

#include "fmha/appendkv_params.h"
#include "tile/device.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha::appendkv {

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

}  // namespace tilefmha::fmha::appendkv
