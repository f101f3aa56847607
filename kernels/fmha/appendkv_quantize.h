// The quantizing append (fmha/appendkv.h, AppendKvTraits::kQuantize): fp16 or bf16 new tokens
// into an fp8 paged cache with a scale per page and KV head, as tilefmha::quantizes_append
// defines it. A thread group owns one (sequence, page segment, KV head) of K or of V, so every
// page's scale has a single writer and needs no atomics:
//   1. the group's lanes stride over the segment's new values (K rotated by RoPE in fp32) for
//      their largest finite magnitude, reduced across the group by shuffles;
//   2. the page's scale follows (appendkv_page_scale); where it grows on a page that held keys,
//      the held codes are re-encoded at the new scale;
//   3. the values are rotated again and stored as codes of value / scale (cvt.rn.satfinite, so
//      infinities saturate and NaN stays NaN), and one lane writes the scale.
// Values move one element at a time: the pass is the correctness-first form of this family.
#pragma once

#include "fmha/appendkv_chunk.h"
#include "fmha/appendkv_params.h"
#include "fmha/appendkv_rope.h"
#include "tile/device.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha::appendkv {

// Element d of a new token's row: fp16 or bf16 bits, widened.
TILEFMHA_DEVICE float new_value(const AppendKvParams& p, const tile::u16* row, int d) {
  const tile::u16 bits = row[d];
  return p.new_bf16 != 0 ? tile::to_float(tile::bfloat16_t{bits})
                         : tile::to_float(tile::half_t{bits});
}

// Element d of a new K or V row as it is stored: K's first rotary_dim dims rotated at `position`
// (the reference's pairs: interleaved (2f, 2f + 1), half-rotated (f, f + rotary_dim / 2)).
template <class Traits>
TILEFMHA_DEVICE float appended_value(const AppendKvParams& p, const tile::u16* row, int d,
                                     bool rotate, long long position) {
  const float x = new_value(p, row, d);
  const int rotary = int(p.rotary_dim);
  if constexpr (Traits::kRope == RopeMode::none) {
    return x;
  } else {
    if (!rotate || d >= rotary) return x;
    const int half = rotary / 2;
    const bool interleaved = Traits::kRope == RopeMode::interleaved;
    const int f = interleaved ? d / 2 : (d < half ? d : d - half);
    const int partner = interleaved ? (d ^ 1) : (d < half ? d + half : d - half);
    const bool first = interleaved ? d % 2 == 0 : d < half;
    float c, s;
    rope_angle(p, position, f, c, s);
    const float y = new_value(p, row, partner);
    return first ? x * c - y * s : x * c + y * s;
  }
}

// The fp8 code of `value` (round to nearest even, saturating to the largest finite value).
template <class T>
TILEFMHA_DEVICE T fp8_code(float value) {
  return from_bits<T>(tile::pack_pair<T>(value, 0.0f) & 0xFFu);
}

template <class Traits>
TILEFMHA_DEVICE void quantize_segment(const AppendKvParams& p, long long group, int lane) {
  using T = typename Traits::Element;
  constexpr int kLanes = Traits::kLanes;
  constexpr float kLargest =
      tile::same_type<T, tile::float_e5m2_t>::value ? kAppendKvE5m2Largest : kAppendKvE4m3Largest;
  const bool is_k = group < p.k_groups;
  const long long g = is_k ? group : group - p.k_groups;
  const long long head = g % p.nhead_k;
  const long long segment = g / p.nhead_k % (p.segments > 0 ? p.segments : 1);
  const long long b = g / p.nhead_k / (p.segments > 0 ? p.segments : 1);
  // The segment's keys: held ones [first_key, held_keys) and new ones [begin, end).
  long long held_keys = 0, first_key = 0, begin = 0, end = 0;
  if (group < 2 * p.k_groups) {
    held_keys = p.seqlen_k[b];
    first_key = (held_keys / p.page_size + segment) * p.page_size;
    begin = first_key > held_keys ? first_key : held_keys;
    const long long last = held_keys + p.seqlen_knew;
    end = first_key + p.page_size < last ? first_key + p.page_size : last;
  }
  const bool active = begin < end;
  const int dim = int(is_k ? p.hdim_q : p.hdim_v);
  const TokenStrides& from = is_k ? p.k_new_strides : p.v_new_strides;
  const tile::u16* source =
      static_cast<const tile::u16*>(is_k ? p.k_new : p.v_new) + b * from.batch + head * from.head;
  // Groups past the grid's last (sequence, segment, head) read no per-sequence entry.
  const long long position_offset =
      active && p.position_offsets != nullptr ? p.position_offsets[b] : 0;
  const auto row_of = [&](long long key) { return source + (key - held_keys) * from.seq; };

  float amax = 0.0f;
  if (active) {
    const long long count = (end - begin) * dim;
    for (long long i = lane; i < count; i += kLanes) {
      const long long key = begin + i / dim;
      const float x =
          appended_value<Traits>(p, row_of(key), int(i % dim), is_k, key + position_offset);
      // Finite values only (false for infinities and NaN): an infinity saturates, NaN stays NaN.
      if (fabsf(x) <= 3.40282347e+38f) amax = fmaxf(amax, fabsf(x));
    }
  }
  // The page and its scale, read by every lane before the reduction below, whose shuffles order
  // these reads before lane 0 writes the new scale at the end.
  long long page = 0;
  float* scale_entry = nullptr;
  float old_scale = 0.0f;
  if (active) {
    const long long pages_start =
        p.page_indptr != nullptr ? p.page_indptr[b] : b * p.page_table_stride;
    page = p.page_table[pages_start + first_key / p.page_size];
    scale_entry = (is_k ? p.k_page_scales : p.v_page_scales) + page * p.scale_page_stride +
                  head * p.scale_head_stride;
    old_scale = *scale_entry;
  }
  // Every lane of the warp takes part, whatever its group holds; the value moves as its bits.
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    amax = fmaxf(amax, tile::bits_as_float(__shfl_sync(0xffffffffu, tile::float_as_bits(amax),
                                                       lane ^ offset, kLanes)));
  if (!active) return;

  const bool held = held_keys > first_key;
  const float scale = appendkv_page_scale(kLargest, held, old_scale, amax);
  const TokenStrides& to = is_k ? p.k_strides : p.v_strides;
  T* cache = static_cast<T*>(is_k ? p.k : p.v) + page * to.batch + head * to.head;
  if (held && scale != old_scale) {
    const float ratio = old_scale / scale;
    const long long count = (held_keys - first_key) * dim;
    for (long long i = lane; i < count; i += kLanes) {
      T& code = cache[(i / dim) * to.seq + i % dim];
      code = fp8_code<T>(tile::to_float(code) * ratio);
    }
  }
  const float inverse = 1.0f / scale;
  const long long count = (end - begin) * dim;
  for (long long i = lane; i < count; i += kLanes) {
    const long long key = begin + i / dim;
    const int d = int(i % dim);
    const float x = appended_value<Traits>(p, row_of(key), d, is_k, key + position_offset);
    cache[(key - first_key) * to.seq + d] = fp8_code<T>(x * inverse);
  }
  if (lane == 0) *scale_entry = scale;
}

}  // namespace tilefmha::fmha::appendkv
