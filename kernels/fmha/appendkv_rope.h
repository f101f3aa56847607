// Append-KV's RoPE (fmha/appendkv.h): the cos and sin a lane needs for its chunks of one token,
// formed once and applied to every head of the token's run, and the rotation of a chunk with
// them. Every row of one token (all its K heads, all its Q heads) has the same position, so the
// angle work (double precision, the costly part of a rotated append) is paid once per run of
// heads instead of once per element.
#pragma once

#include "fmha/appendkv_chunk.h"
#include "fmha/appendkv_params.h"
#include "tile/device.h"

namespace tilefmha::fmha::appendkv {

// theta^(-2f / rotary_dim), frequency f's, as rope_ratio^f by squaring (at most 8 multiplies for
// f < 256), where a double exp2 per element cost most of the time.
TILEFMHA_DEVICE double rope_frequency(const AppendKvParams& p, int f) {
  double frequency = 1.0, power = p.rope_ratio;
  for (int e = f; e > 0; e >>= 1) {
    if (e & 1) frequency *= power;
    power *= power;
  }
  return frequency;
}

// `angle` less its whole turns, in [-pi, pi], in double.
TILEFMHA_DEVICE double reduced_angle(double angle) {
  constexpr double kTwoPi = 6.283185307179586;
  return fma(-rint(angle * (1.0 / kTwoPi)), kTwoPi, angle);
}

// cos and sin of `frequency` (rope_frequency's) at `position`. The angle is formed and reduced
// to [-pi, pi] in double (fp32 angles lose ~position * 2^-24 radians, visible at long contexts),
// then its sine and cosine taken by the hardware's approximations (abs error ~4e-7 on that range;
// sincosf would keep a slow path for large arguments on the stack): a double sincos per element
// held the RoPE append to ~20% of copy bandwidth (H100).
TILEFMHA_DEVICE void rope_angle_at(double frequency, long long position, float& c, float& s) {
  __sincosf(float(reduced_angle(double(position) * frequency)), &s, &c);
}

// cos and sin of `angle` to float precision without the hardware's approximations (abs error
// ~4e-7, which a rotation repeated row after row would accumulate): reduced to [-pi, pi] in
// double, then the Taylor series to x^21 and x^20 (remainders under 1e-10 there).
TILEFMHA_DEVICE void series_sincos(double angle, float& c, float& s) {
  const double x = reduced_angle(angle);
  const double x2 = x * x;
  double sine = 1.0, cosine = 1.0;
#pragma unroll
  for (int k = 10; k >= 1; --k) {
    sine = fma(-x2 * (1.0 / double(2 * k * (2 * k + 1))), sine, 1.0);
    cosine = fma(-x2 * (1.0 / double((2 * k - 1) * 2 * k)), cosine, 1.0);
  }
  s = float(x * sine);
  c = float(cosine);
}

// cos and sin of frequency f at `position`: from the tables, or from the base.
TILEFMHA_DEVICE void rope_angle(const AppendKvParams& p, long long position, int f, float& c,
                                float& s) {
  if (p.rope_cos != nullptr) {
    c = p.rope_cos[position * p.rope_cos_stride + f];
    s = p.rope_sin[position * p.rope_sin_stride + f];
    return;
  }
  rope_angle_at(rope_frequency(p, f), position, c, s);
}

// The cos and sin of one lane's chunks at one position, in registers: one per pair of a chunk
// (interleaved: dims 2f and 2f + 1 share frequency f) or one per element (half-rotated: a chunk
// holds consecutive dims, each its own frequency). Slots past rotary_dim stay unset and unused.
template <class Traits>
struct LaneAngles {
  static constexpr bool kHalf = Traits::kRope == RopeMode::half_rotated;
  static constexpr int kPerChunk = kHalf ? Traits::kVector : Traits::kVector / 2;
  float cosine[Traits::kChunksPerLane][kPerChunk];
  float sine[Traits::kChunksPerLane][kPerChunk];

  TILEFMHA_DEVICE void compute(const AppendKvParams& p, long long position, int dim, int lane) {
    const int rotary = int(p.rotary_dim), half = rotary / 2;
#pragma unroll
    for (int c = 0; c < Traits::kChunksPerLane; ++c) {
      const int d = (c * Traits::kLanes + lane) * Traits::kVector;
      if (d >= dim || d >= rotary) continue;
#pragma unroll
      for (int a = 0; a < kPerChunk; ++a) {
        const int index = kHalf ? d + a : d + 2 * a;
        if (index >= rotary) continue;
        const int f = kHalf ? (index < half ? index : index - half) : index / 2;
        rope_angle(p, position, f, cosine[c][a], sine[c][a]);
      }
    }
  }
};

// The half-rotated partners of `chunk`, the lane's chunk at dim `d` of the row at `source` (dims
// below rotary_dim; dim f pairs with f + rotary_dim / 2). Where a lane holds one chunk of the row
// and the half is a multiple of the chunk, the partner chunk is wholly another lane's of the same
// group, half / kVector lanes away, and comes by shuffle: no second read of the row, and no
// registers held for partners across a batch. Else a 16-byte load where the half allows it, or
// element by element. Every lane of the warp calls it (the shuffle), whatever it holds; only a
// lane whose chunk is `wanted` (a real row that rotates) reads memory, and the result matters
// only for chunks below rotary_dim.
template <class Traits>
TILEFMHA_DEVICE Chunk half_partner(const Chunk& chunk, const typename Traits::Element* source,
                                   bool wanted, bool vector, int dim, int d, int rotary, int lane) {
  using T = typename Traits::Element;
  constexpr int kVector = Traits::kVector;
  static_assert(Traits::kRope == RopeMode::half_rotated, "only half-rotated RoPE has partners");
  Chunk out{{0, 0, 0, 0}};
  const int half = rotary / 2;
  const bool whole_chunks = vector && half % kVector == 0;
  if constexpr (Traits::kChunksPerLane == 1) {
    const int shift = half / kVector;
    const int from = d < half ? lane + shift : lane - shift;
    const int source_lane = d < rotary && whole_chunks ? from : lane;
#pragma unroll
    for (int w = 0; w < 4; ++w)
      out.word[w] = __shfl_sync(0xffffffffu, chunk.word[w], source_lane, Traits::kLanes);
    if (whole_chunks) return out;
    out = Chunk{{0, 0, 0, 0}};
  }
  if (!wanted || d >= rotary || d >= dim) return out;
  if (whole_chunks) {
    load_chunk<T, kVector>(source + (d < half ? d + half : d - half), true, kVector, out);
    return out;
  }
#pragma unroll
  for (int e = 0; e < kVector; ++e) {
    const int index = d + e;
    if (index < rotary && index < dim)
      set_element<T>(out, e, bits_of(source[index < half ? index + half : index - half]));
  }
  return out;
}

// Rotates the dims below rotary_dim of the chunk at dim `d` in place with the lane's angles of
// that chunk: widened to fp32, rotated, rounded back to the element type a pair at a time.
// rotary_dim and every chunk start are even, so a pair lies wholly below rotary_dim or wholly
// past it (and interleaved pairs (2f, 2f + 1) in one chunk). Half-rotated:
// (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), x2 the upper half.
template <class Traits>
TILEFMHA_DEVICE void rotate_chunk(int rotary, int d, Chunk& x, const Chunk& partner,
                                  const float (&cosine)[LaneAngles<Traits>::kPerChunk],
                                  const float (&sine)[LaneAngles<Traits>::kPerChunk]) {
  using T = typename Traits::Element;
  const int half = rotary / 2;
#pragma unroll
  for (int e = 0; e < Traits::kVector; e += 2) {
    const int index = d + e;
    if (index >= rotary) continue;
    const float x1 = widen<T>(x, e), x2 = widen<T>(x, e + 1);
    float lo, hi;
    if constexpr (LaneAngles<Traits>::kHalf) {
      const float p1 = widen<T>(partner, e), p2 = widen<T>(partner, e + 1);
      lo = index < half ? x1 * cosine[e] - p1 * sine[e] : x1 * cosine[e] + p1 * sine[e];
      hi = index + 1 < half ? x2 * cosine[e + 1] - p2 * sine[e + 1]
                            : x2 * cosine[e + 1] + p2 * sine[e + 1];
    } else {
      lo = x1 * cosine[e / 2] - x2 * sine[e / 2];
      hi = x2 * cosine[e / 2] + x1 * sine[e / 2];
    }
    narrow_pair<T>(x, e, lo, hi);
  }
}

}  // namespace tilefmha::fmha::appendkv
