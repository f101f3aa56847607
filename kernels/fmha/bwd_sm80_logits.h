// Feature hooks of the sm80_mma backward (fmha/bwd_sm80.h) beyond the mask: the soft cap's
// derivative, dropout replayed on the transposed score tiles, and the dBias output. The bias and
// ALiBi hook is the forward's own (fmha/logits.h) and the elementwise bias reads the same
// element, so both directions add the same logit.
//
// The kernel holds S^T: a lane's accumulator element e (0..3) of an 8-query tile is query
// q0 + (e & 1), key k0 + (e >> 1) * 8 with q0 = tile + 2 * (lane & 3) and k0 = warp key + lane / 4.
#pragma once

#include "fmha/bwd_params.h"
#include "fmha/dropout.h"
#include "fmha/logits.h"
#include "fmha/seq_info.h"
#include "tile/fast_math.h"
#include "tile/numeric_types.h"
#include "tile/warp_reduce.h"

namespace tilefmha::fmha {

// Natural-log softmax gradient scale of one logit: ds/d(dot) = scale, or with a soft cap
// scale * (1 - tanh^2); the base-2 logit (before any bias) comes with it.
template <bool SoftCap>
struct BwdLogit {
  float scale, scale_log2, scale_over_cap, cap_log2;

  TILEFMHA_DEVICE explicit BwdLogit(const FwdParams& p)
      : scale(p.scale),
        scale_log2(p.scale_log2),
        scale_over_cap(p.scale * p.softcap_inverse),
        cap_log2(p.softcap * kLog2e) {}

  TILEFMHA_DEVICE float logit2(float dot, float& d_dot) const {
    if constexpr (SoftCap) {
      const float t = tanh_accurate(dot * scale_over_cap);
      d_dot = scale * (1.0f - t * t);
      return cap_log2 * t;
    } else {
      d_dot = scale;
      return dot * scale_log2;
    }
  }
};

struct BwdNoDropout {
  static constexpr bool kEnabled = false;
  TILEFMHA_DEVICE BwdNoDropout(const FwdParams&, int, int) {}
  TILEFMHA_DEVICE void factors(float (&)[4], int, int) const {}
};

// The forward's drop decisions (fmha/dropout.h: one Philox call per query and 4 keys) for a
// lane's four elements of an S^T tile, as factors Z = 0 (dropped) or 1 / (1 - p) (kept).
// The four elements need four calls, and so do the three lanes holding the other keys of the
// same 4-key group (lanes differing in bits 2 and 3): each lane makes one of the four calls
// and hands the other lanes their words' decisions with three butterfly shuffles.
struct BwdPhiloxDropout {
  static constexpr bool kEnabled = true;
  // The stream's key and counter words are PhiloxDropout's (fmha/dropout.h), read from the
  // parameters where used: the backward's loop has no registers to spare for them.
  const FwdParams& p;
  unsigned int head_index;  // b * nhead_q + h

  TILEFMHA_DEVICE BwdPhiloxDropout(const FwdParams& params, int b, int h)
      : p(params), head_index(static_cast<unsigned int>(b * params.nhead_q + h)) {}

  TILEFMHA_DEVICE float keep(unsigned int word) const {
    return philox::dropout_keep(word, p.dropout_threshold) ? p.dropout_keep_scale : 0.0f;
  }

  // q0, k0: the lane's first query and key (sequence-local); k0 % 4 is the lane's place g in
  // its 4-key group, so element e's word is word g of call e. Every lane of the warp calls.
  TILEFMHA_DEVICE void factors(float (&z)[4], int q0, int k0) const {
    const int g = k0 & 3;
    // Call e = g: query q0 + (g & 1), keys of the group (g >> 1) * 8 further.
    const philox::Word4 counter = {static_cast<unsigned int>(((k0 & ~3) + (g >> 1) * 8) >> 2),
                                   static_cast<unsigned int>(q0 + (g & 1)), head_index,
                                   static_cast<unsigned int>(p.dropout_offset)};
    const philox::Word4 r =
        philox::philox4x32_10(counter, static_cast<unsigned int>(p.dropout_seed),
                              static_cast<unsigned int>(p.dropout_seed >> 32) ^
                                  static_cast<unsigned int>(p.dropout_offset >> 32));
    const float f[4] = {keep(r.x), keep(r.y), keep(r.z), keep(r.w)};
    auto word = [&](int w) { return w == 0 ? f[0] : (w == 1 ? f[1] : (w == 2 ? f[2] : f[3])); };
    // Round s: the lane 4 * s away (place g ^ s) made call g ^ s and sends word g of it.
    float from[4];
    from[0] = word(g);
#pragma unroll
    for (int s = 1; s < 4; ++s) from[s] = tile::shuffle_xor(word(g ^ s), s << 2);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int s = e ^ g;
      z[e] = s == 0 ? from[0] : (s == 1 ? from[1] : (s == 2 ? from[2] : from[3]));
    }
  }
};

// The forward's elementwise bias (fmha/logits.h) with its fields read from the kernel's
// parameters where they are used rather than copied: the backward's loop has no registers to
// spare for them.
struct BwdElementwiseBias {
  const FwdParams& p;
  const SeqInfo& seq;
  long long head_offset;  // element (b, h, 0, 0)

  TILEFMHA_DEVICE BwdElementwiseBias(const FwdParams& params, const SeqInfo& info, int b, int h)
      : p(params),
        seq(info),
        head_offset(b * params.bias_batch_stride + h * params.bias_head_stride) {}

  // Pairs outside the sequence are masked; they must not be read.
  TILEFMHA_DEVICE float operator()(float logit2, int i, int j) const {
    if (i >= seq.len_q || j >= seq.len_k) return logit2;
    const long long at = head_offset + i * p.bias_row_stride + j * p.bias_col_stride;
    return logit2 + load_as_float(p.bias, p.bias_kind, at) * kLog2e;
  }
};

struct NoDBias {
  static constexpr bool kEnabled = false;
  TILEFMHA_DEVICE NoDBias(const BwdParams&, const SeqInfo&, int, int) {}
  TILEFMHA_DEVICE void put(float, int, int) const {}
  TILEFMHA_DEVICE void zero(int, int, int, int, int, int) const {}
};

// dBias[b, h, i, j] = dS (the gradient of the natural-log logit, before ds/d(dot)). Without
// broadcast every element belongs to one CTA (its key block, the head's KV head, sequence b),
// which stores each exactly once in dbias's dtype, zeros included; a broadcast dBias (fp32,
// zeroed before the launch) takes fp32 atomic adds of the visible pairs instead. Fields are
// read from the parameters where used, as for the bias.
struct BwdDBias {
  static constexpr bool kEnabled = true;
  const BwdParams& bp;
  const SeqInfo& seq;
  long long head_offset;  // element (b, h, 0, 0)

  TILEFMHA_DEVICE BwdDBias(const BwdParams& params, const SeqInfo& info, int b, int h)
      : bp(params),
        seq(info),
        head_offset(b * params.dbias_batch_stride + h * params.dbias_head_stride) {}

  TILEFMHA_DEVICE void store(long long at, float value) const {
    switch (bp.dbias_kind) {
      case ScalarKind::fp16:
        static_cast<tile::half_t*>(bp.dbias)[at] = tile::from_float<tile::half_t>(value);
        break;
      case ScalarKind::bf16:
        static_cast<tile::bfloat16_t*>(bp.dbias)[at] = tile::from_float<tile::bfloat16_t>(value);
        break;
      default: static_cast<float*>(bp.dbias)[at] = value;
    }
  }

  // dS of pair (i, j), sequence-local, from the kernel's tiles: rows past the sequence are
  // left to zero(); keys past it in the view (a block the sequence ends in) get their dS, 0
  // there (masked); keys past the view are not stored.
  TILEFMHA_DEVICE void put(float ds, int i, int j) const {
    if (i >= seq.len_q || j >= bp.fwd.seqlen_k) return;
    const long long at = head_offset + i * bp.dbias_row_stride + j * bp.dbias_col_stride;
    if (bp.dbias_accumulate != 0) {
      if (j < seq.len_k) atomicAdd(static_cast<float*>(bp.dbias) + at, ds);
    } else {
      store(at, ds);
    }
  }

  // Zeros over rows [row_begin, row_end) and keys [key_begin, key_end), spread over the CTA's
  // threads: what no visited query block covers. A broadcast dBias was zeroed before.
  TILEFMHA_DEVICE void zero(int row_begin, int row_end, int key_begin, int key_end, int thread,
                            int threads) const {
    if (bp.dbias_accumulate != 0 || row_end <= row_begin || key_end <= key_begin) return;
    const int keys = key_end - key_begin;
    const long long count = (long long)(row_end - row_begin) * keys;
    for (long long n = thread; n < count; n += threads) {
      const int i = row_begin + int(n / keys);
      const int j = key_begin + int(n % keys);
      store(head_offset + i * bp.dbias_row_stride + j * bp.dbias_col_stride, 0.0f);
    }
  }
};

}  // namespace tilefmha::fmha
