// The quantizing append (fmha/appendkv.h, AppendKvTraits::kQuantize): fp16 or bf16 new tokens
// into an fp8 paged cache with a scale per page and KV head, as tilefmha::quantizes_append
// defines it. A thread group owns one (sequence, page segment, KV head) of K or of V, so every
// page's scale has a single writer and needs no atomics:
//   1. the group has a lane per span of 8 dims of a row (one 16-byte load of the new tokens),
//      and each lane reads its span of every new row of the segment (K rotated by RoPE in fp32,
//      the span's frequencies formed once, the angles stepped from row to row) for their
//      largest finite magnitude, reduced across the group by shuffles; segments of up to
//      kKeptRows rows (pages of up to 16 keys) are loaded at once and staged in shared memory,
//      longer ones are read again in step 3;
//   2. the page's scale follows (appendkv_page_scale); where it grows on a page that held keys,
//      the held codes are re-encoded at the new scale (element by element: rare);
//   3. the spans are rotated again and stored as codes of value / scale (one 8-byte store;
//      cvt.rn.satfinite, so infinities saturate and NaN stays NaN), and one lane writes the
//      scale.
// The first form moved one element at a time with 64-bit index divisions, at 2-12% of copy
// bandwidth (H200; now 29-63% at page 16); views whose strides or head dim are not whole spans
// still move element by element.
#pragma once

#include "fmha/appendkv_chunk.h"
#include "fmha/appendkv_params.h"
#include "fmha/appendkv_rope.h"
#include "tile/device.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha::appendkv {

// A new token's element from its fp16 or bf16 bits, widened.
TILEFMHA_DEVICE float widen_new(const AppendKvParams& p, tile::u16 bits) {
  return p.new_bf16 != 0 ? tile::to_float(tile::bfloat16_t{bits})
                         : tile::to_float(tile::half_t{bits});
}

// Element d of a new token's row.
TILEFMHA_DEVICE float new_value(const AppendKvParams& p, const tile::u16* row, int d) {
  return widen_new(p, row[d]);
}

// A lane's share of a row: 8 consecutive dims, 16 bytes of the 16-bit new tokens and 8 of codes.
constexpr int kQuantizeSpan = 8;

// Rows of a page segment staged in shared memory between finding the page's scale and storing
// its codes (quantize_segment): every page of up to 16 keys.
constexpr int kKeptRows = 16;

// A span of new tokens from its 16 bytes, widened.
TILEFMHA_DEVICE void widen_span(const AppendKvParams& p, const uint4& bits,
                                float (&x)[kQuantizeSpan]) {
  const tile::u32 words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int e = 0; e < kQuantizeSpan; ++e)
    x[e] = widen_new(p, tile::u16(words[e / 2] >> (e % 2 * 16)));
}

// Dims [d, d + kQuantizeSpan) of a new token's row, widened (0 past `dim`): one 16-byte load
// where `vector` (base, strides and head dim in whole spans).
TILEFMHA_DEVICE void load_span(const AppendKvParams& p, const tile::u16* row, int d, int dim,
                               bool vector, float (&x)[kQuantizeSpan]) {
  if (vector) {
    widen_span(p, *reinterpret_cast<const uint4*>(row + d), x);
    return;
  }
#pragma unroll
  for (int e = 0; e < kQuantizeSpan; ++e) x[e] = d + e < dim ? new_value(p, row, d + e) : 0.0f;
}

// RoPE frequency index of element e of the span at dim `d` (d + e below rotary_dim): pairs
// (2f, 2f + 1) interleaved, (f, f + rotary_dim / 2) half-rotated.
template <class Traits>
TILEFMHA_DEVICE int span_frequency_index(int rotary, int d, int e) {
  const int index = d + e, half = rotary / 2;
  if constexpr (Traits::kRope == RopeMode::interleaved) return index / 2;
  return index < half ? index : index - half;
}

// Consecutive rows of a page segment sit at consecutive positions, so a row's angles are the
// previous row's turned by one step of each frequency: four multiplies per element instead of a
// double reduction and two MUFU operations (the angles were most of a rotating append's time).
// Every kAnglesExactEvery rows the angles are formed exactly again, which bounds the steps'
// drift to that many roundings of float (about 1e-6 radians at 16 rows).
constexpr int kAnglesExactEvery = 16;

// The frequencies of one span's dims and their steps, formed once per lane: a lane's spans sit
// at the same dims in every row of its segment (quantize_segment). Unused (zero) with tables or
// past rotary_dim.
template <class Traits>
struct SpanFrequencies {
  double of[kQuantizeSpan];
  float step_cos[kQuantizeSpan], step_sin[kQuantizeSpan];

  TILEFMHA_DEVICE void form(const AppendKvParams& p, int d) {
    const int rotary = int(p.rotary_dim);
#pragma unroll
    for (int e = 0; e < kQuantizeSpan; ++e) {
      of[e] = p.rope_cos == nullptr && d + e < rotary
                  ? rope_frequency(p, span_frequency_index<Traits>(rotary, d, e))
                  : 0.0;
      series_sincos(of[e], step_cos[e], step_sin[e]);
    }
  }
};

// The cos and sin of each element of one span at a row's position.
template <class Traits>
struct SpanAngles {
  float c[kQuantizeSpan], s[kQuantizeSpan];

  // Exactly, at `position`: from the tables or the frequencies.
  TILEFMHA_DEVICE void at(const AppendKvParams& p, long long position, int d,
                          const SpanFrequencies<Traits>& frequencies) {
    const int rotary = int(p.rotary_dim);
#pragma unroll
    for (int e = 0; e < kQuantizeSpan; ++e) {
      if (p.rope_cos != nullptr)
        rope_angle(p, position, d + e < rotary ? span_frequency_index<Traits>(rotary, d, e) : 0,
                   c[e], s[e]);
      else
        rope_angle_at(frequencies.of[e], position, c[e], s[e]);
    }
  }
  // At row r of a run of consecutive positions whose row 0 is at `position - r`: exactly every
  // kAnglesExactEvery rows and wherever tables give them, else one step on from row r - 1.
  TILEFMHA_DEVICE void advance(const AppendKvParams& p, long long position, int r, int d,
                               const SpanFrequencies<Traits>& frequencies) {
    if (r % kAnglesExactEvery == 0 || p.rope_cos != nullptr) {
      at(p, position, d, frequencies);
      return;
    }
#pragma unroll
    for (int e = 0; e < kQuantizeSpan; ++e) {
      const float cosine = c[e] * frequencies.step_cos[e] - s[e] * frequencies.step_sin[e];
      s[e] = s[e] * frequencies.step_cos[e] + c[e] * frequencies.step_sin[e];
      c[e] = cosine;
    }
  }
};

// Rotates the span at dim `d` of a K row, `x`, by `angles` (the reference's pairs: interleaved
// (2f, 2f + 1), half-rotated (f, f + rotary_dim / 2), whose partners are `partner`).
// Interleaved pairs lie in one span (d and rotary_dim are even), so a pair is wholly below
// rotary_dim or past it.
template <class Traits>
TILEFMHA_DEVICE void rotate_span(const AppendKvParams& p, int d, const SpanAngles<Traits>& angles,
                                 const float (&partner)[kQuantizeSpan], float (&x)[kQuantizeSpan]) {
  const int rotary = int(p.rotary_dim);
  if (d >= rotary) return;
  if constexpr (Traits::kRope == RopeMode::interleaved) {
#pragma unroll
    for (int e = 0; e < kQuantizeSpan; e += 2) {
      if (d + e >= rotary) continue;
      const float c = angles.c[e], s = angles.s[e];
      const float x0 = x[e], x1 = x[e + 1];
      x[e] = x0 * c - x1 * s;
      x[e + 1] = x1 * c + x0 * s;
    }
  } else if constexpr (Traits::kRope == RopeMode::half_rotated) {
    const int half = rotary / 2;
#pragma unroll
    for (int e = 0; e < kQuantizeSpan; ++e) {
      const int index = d + e;
      if (index >= rotary) continue;
      const float c = angles.c[e], s = angles.s[e];
      x[e] = index < half ? x[e] * c - partner[e] * s : x[e] * c + partner[e] * s;
    }
  }
}

// The span at dim `d` of a new K or V row as it is stored, read from `row`: K rotated (`rotate`)
// by `angles`. Half-rotated partners are a span rotary_dim / 2 away, read whole where it is a
// multiple of the span.
template <class Traits>
TILEFMHA_DEVICE void appended_span(const AppendKvParams& p, const tile::u16* row, int d, int dim,
                                   bool vector, bool rotate, const SpanAngles<Traits>& angles,
                                   float (&x)[kQuantizeSpan]) {
  load_span(p, row, d, dim, vector, x);
  if constexpr (Traits::kRope != RopeMode::none) {
    const int rotary = int(p.rotary_dim);
    if (!rotate || d >= rotary) return;
    float partner[kQuantizeSpan] = {};
    if constexpr (Traits::kRope == RopeMode::half_rotated) {
      const int half = rotary / 2;
      if (vector && half % kQuantizeSpan == 0) {
        load_span(p, row, d < half ? d + half : d - half, dim, true, partner);
      } else {
#pragma unroll
        for (int e = 0; e < kQuantizeSpan; ++e) {
          const int index = d + e;
          partner[e] = index < rotary && index < dim
                           ? new_value(p, row, index < half ? index + half : index - half)
                           : 0.0f;
        }
      }
    }
    rotate_span<Traits>(p, d, angles, partner, x);
  }
}

// The fp8 code of `value` (round to nearest even, saturating to the largest finite value).
template <class T>
TILEFMHA_DEVICE T fp8_code(float value) {
  return from_bits<T>(tile::pack_pair<T>(value, 0.0f) & 0xFFu);
}

// The codes of a span's values times `inverse`, at `target`: one 8-byte store where `vector`,
// else the first `count` one at a time.
template <class T>
TILEFMHA_DEVICE void store_codes(T* target, int count, bool vector, const float (&x)[kQuantizeSpan],
                                 float inverse) {
  if (vector) {
    tile::u32 words[2];
#pragma unroll
    for (int w = 0; w < 2; ++w)
      words[w] = (tile::pack_pair<T>(x[4 * w] * inverse, x[4 * w + 1] * inverse) & 0xFFFFu) |
                 (tile::pack_pair<T>(x[4 * w + 2] * inverse, x[4 * w + 3] * inverse) << 16);
    *reinterpret_cast<uint2*>(target) = make_uint2(words[0], words[1]);
    return;
  }
#pragma unroll
  for (int e = 0; e < kQuantizeSpan; ++e)
    if (e < count) target[e] = fp8_code<T>(x[e] * inverse);
}

template <class Traits>
TILEFMHA_DEVICE void quantize_segment(const AppendKvParams& p, long long group, int lane) {
  using T = typename Traits::Element;
  constexpr int kLanes = Traits::kLanes;
  // Spans of a row a lane takes (one up to hdim 256).
  static_assert(Traits::kLaneElements == kQuantizeSpan, "a lane's element count is a span's");
  constexpr int kSpansPerRow = (Traits::kHdim + kQuantizeSpan - 1) / kQuantizeSpan;
  constexpr int kSlots = (kSpansPerRow + kLanes - 1) / kLanes;
  // Rows a lane has in flight where it rotates, so the angles' latency hides behind loads (H200,
  // b64 x 512 tokens half-rotated: 1 row 568 us, 2 rows 363-367, 4 rows 407-410, and 4 spilled
  // at hdim 256); unrotated rows lost by it (146 -> 165 us at 4).
  [[maybe_unused]] constexpr int kRotatedRowsInFlight = Traits::kRope == RopeMode::none ? 1 : 2;
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

  const int rows = int(end - begin);
  const bool vector_in = vectorizable<kQuantizeSpan>(is_k ? p.k_new : p.v_new, from, dim);
  // The page and its scale, read first so that their two dependent reads overlap the rows'
  // loads; every lane reads them before the reduction below, whose shuffles order these reads
  // before lane 0 writes the new scale at the end.
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
  constexpr bool kRotates = Traits::kRope != RopeMode::none;
  constexpr bool kHalf = Traits::kRope == RopeMode::half_rotated;
  const auto lane_has = [&](int r, int slot) {
    return r < rows && (lane + slot * kLanes) * kQuantizeSpan < dim;
  };
  // A segment of at most kKeptRows rows (every page of up to 16 keys) is read once: a lane
  // issues the 16-byte loads of its span of every row together, without branches between them
  // (loads under a branch each waited for the last: H200, b64 x 512 tokens, 100 -> 200 us), and
  // stages them in shared memory until the page's scale is known; half-rotated partners are
  // read there from the lane that loaded them, so the choice is the warp's. Both visits below
  // then run as short loops (the rows kept in registers instead took 238 registers, 8 warps an
  // SM, and a fully unrolled body that missed the instruction cache). Longer segments, and views
  // that are not whole spans, read their rows again from L2 for the codes.
  const int half = int(p.rotary_dim) / 2;
  const bool keeps_rows =
      kSlots == 1 && __all_sync(0xffffffffu, rows <= kKeptRows && vector_in &&
                                                 (!kHalf || half % kQuantizeSpan == 0));
  const int d = lane * kQuantizeSpan;  // the lane's span where kSlots == 1
  const int thread = int(threadIdx.x);
  // [row][thread]: a warp's lanes store one row's spans side by side, without bank conflicts.
  __shared__ uint4 staged[kKeptRows][Traits::kThreads];
  if (keeps_rows) {
    uint4 bits[kKeptRows];
#pragma unroll
    for (int r = 0; r < kKeptRows; ++r) {
      bits[r] = make_uint4(0, 0, 0, 0);
      if (lane_has(r, 0)) bits[r] = *reinterpret_cast<const uint4*>(row_of(begin + r) + d);
    }
#pragma unroll
    for (int r = 0; r < kKeptRows; ++r) staged[r][thread] = bits[r];
    __syncwarp();
  }
  // Formed once the staged rows have left the registers, which they would otherwise share.
  SpanFrequencies<Traits> frequencies[kSlots];
  if constexpr (kRotates) {
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot)
      if (is_k) frequencies[slot].form(p, (lane + slot * kLanes) * kQuantizeSpan);
  }
  // The partner of dim f below rotary_dim is f + half or f - half, half / 8 lanes away.
  const int partner = d >= 2 * half ? thread
                      : d < half    ? thread + half / kQuantizeSpan
                                    : thread - half / kQuantizeSpan;
  // visit(key, d, x) for each of the lane's spans of the segment's new rows, as stored (K
  // rotated, its angles advanced row by row), twice: for the largest magnitude, then for the
  // codes. Both visits form the same values the same way.
  const auto each_span = [&](auto&& visit) {
    if (keeps_rows) {
      SpanAngles<Traits> angles;
#pragma unroll 1
      for (int r = 0; r < rows; ++r) {
        float x[kQuantizeSpan];
        widen_span(p, staged[r][thread], x);
        if constexpr (kRotates) {
          if (is_k) {
            float partners[kQuantizeSpan] = {};
            if constexpr (kHalf) widen_span(p, staged[r][partner], partners);
            angles.advance(p, begin + r + position_offset, r, d, frequencies[0]);
            rotate_span<Traits>(p, d, angles, partners, x);
          }
        }
        if (d < dim) visit(begin + r, d, x);
      }
      return;
    }
    SpanAngles<Traits> angles[kSlots];
#pragma unroll(kRotatedRowsInFlight)
    for (int r = 0; r < rows; ++r) {
#pragma unroll
      for (int slot = 0; slot < kSlots; ++slot) {
        if (!lane_has(r, slot)) continue;
        const int span = (lane + slot * kLanes) * kQuantizeSpan;
        if constexpr (kRotates)
          if (is_k)
            angles[slot].advance(p, begin + r + position_offset, r, span, frequencies[slot]);
        float x[kQuantizeSpan];
        appended_span<Traits>(p, row_of(begin + r), span, dim, vector_in, is_k, angles[slot], x);
        visit(begin + r, span, x);
      }
    }
  };
  // The largest finite magnitude (infinities saturate, NaN stays NaN).
  float amax = 0.0f;
  each_span([&](long long, int, const float(&x)[kQuantizeSpan]) {
#pragma unroll
    for (int e = 0; e < kQuantizeSpan; ++e)
      if (fabsf(x[e]) <= 3.40282347e+38f) amax = fmaxf(amax, fabsf(x[e]));
  });
  // Every lane of the warp takes part, whatever its group holds; the value moves as its bits.
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    amax = fmaxf(amax, tile::bits_as_float(__shfl_sync(0xffffffffu, tile::float_as_bits(amax),
                                                       lane ^ offset, kLanes)));
  if (!active) return;

  const bool held = held_keys > first_key;
  const float scale = appendkv_page_scale(kLargest, held, old_scale, amax);
  const TokenStrides& to = is_k ? p.k_strides : p.v_strides;
  T* const pool = static_cast<T*>(is_k ? p.k : p.v);
  T* cache = pool + page * to.batch + head * to.head;
  if (held && scale != old_scale) {
    const float ratio = old_scale / scale;
    const int held_rows = int(held_keys - first_key);
    for (int i = lane; i < held_rows * dim; i += kLanes) {
      const int r = i / dim;
      T& code = cache[r * to.seq + (i - r * dim)];
      code = fp8_code<T>(tile::to_float(code) * ratio);
    }
  }
  const float inverse = 1.0f / scale;
  const bool vector_out = reinterpret_cast<unsigned long long>(pool) % 8 == 0 &&
                          ((to.batch | to.seq | to.head | dim) % kQuantizeSpan) == 0;
  each_span([&](long long key, int span, const float(&x)[kQuantizeSpan]) {
    store_codes<T>(cache + (key - first_key) * to.seq + span, dim - span, vector_out, x, inverse);
  });
  if (lane == 0) *scale_entry = scale;
}

}  // namespace tilefmha::fmha::appendkv
