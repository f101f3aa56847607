// Logits transform hooks: the raw dot product q.k of a pair (i, j) to its logit in the base-2
// domain (natural logit * log2(e)), which the softmax exponentiates with exp2.
//
//   Logits<Cap, Bias>: Cap is PlainScale (s = scale * dot) or SoftCap (s = cap * tanh(scale *
//   dot / cap)); Bias is NoBias, ElementwiseBias (+ bias[b, h, i, j]) or AlibiBias
//   (- slope * |i + len_k - len_q - j|), added after the cap as the reference does.
#pragma once

#include "fmha/fwd_params.h"
#include "fmha/seq_info.h"
#include "tile/fast_math.h"
#include "tile/numeric_types.h"

namespace tilefmha::fmha {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct PlainScale {
  float scale_log2;
  TILEFMHA_DEVICE explicit PlainScale(const FwdParams& p) : scale_log2(p.scale_log2) {}
  TILEFMHA_DEVICE float operator()(float dot) const { return dot * scale_log2; }
};

// tanh from one exp2: (1 - e) / (1 + e) with e = exp(-2|x|) in (0, 1] never overflows, and its
// absolute error (what a logit error is measured in) stays near float epsilon.
TILEFMHA_DEVICE float tanh_accurate(float x) {
  const float e = tile::exp2_approx(-2.0f * kLog2e * (x < 0 ? -x : x));
  const float t = (1.0f - e) * tile::reciprocal_approx(1.0f + e);
  return x < 0 ? -t : t;
}

struct SoftCap {
  float scale_over_cap;
  float cap_log2;
  TILEFMHA_DEVICE explicit SoftCap(const FwdParams& p)
      : scale_over_cap(p.scale * p.softcap_inverse), cap_log2(p.softcap * kLog2e) {}
  TILEFMHA_DEVICE float operator()(float dot) const {
    return cap_log2 * tanh_accurate(dot * scale_over_cap);
  }
};

struct NoBias {
  TILEFMHA_DEVICE NoBias(const FwdParams&, const SeqInfo&, int, int) {}
  TILEFMHA_DEVICE float operator()(float logit2, int, int) const { return logit2; }
};

// Element `at` of a bias-like tensor of `kind` (fp16, bf16 or fp32), widened to fp32.
TILEFMHA_DEVICE float load_as_float(const void* data, ScalarKind kind, long long at) {
  switch (kind) {
    case ScalarKind::fp16: return tile::to_float(static_cast<const tile::half_t*>(data)[at]);
    case ScalarKind::bf16: return tile::to_float(static_cast<const tile::bfloat16_t*>(data)[at]);
    default: return static_cast<const float*>(data)[at];
  }
}

struct ElementwiseBias {
  const unsigned char* base;  // element (b, h, 0, 0)
  ScalarKind kind;
  long long row_stride, col_stride;
  int len_q, len_k;

  TILEFMHA_DEVICE ElementwiseBias(const FwdParams& p, const SeqInfo& seq, int b, int h)
      : kind(p.bias_kind),
        row_stride(p.bias_row_stride),
        col_stride(p.bias_col_stride),
        len_q(seq.len_q),
        len_k(seq.len_k) {
    const long long offset = b * p.bias_batch_stride + h * p.bias_head_stride;
    base = static_cast<const unsigned char*>(p.bias) + offset * element_bytes(kind);
  }

  TILEFMHA_DEVICE static int element_bytes(ScalarKind kind) {
    return kind == ScalarKind::fp32 ? 4 : 2;
  }

  TILEFMHA_DEVICE float load(int i, int j) const {
    return load_as_float(base, kind, i * row_stride + j * col_stride);
  }

  // Pairs outside the sequence are masked later; they must not be read.
  TILEFMHA_DEVICE float operator()(float logit2, int i, int j) const {
    if (i >= len_q || j >= len_k) return logit2;
    return logit2 + load(i, j) * kLog2e;
  }
};

struct AlibiBias {
  float slope_log2;
  int shift;  // len_k - len_q: distance = |i + shift - j|

  TILEFMHA_DEVICE AlibiBias(const FwdParams& p, const SeqInfo& seq, int b, int h)
      : slope_log2(p.alibi_slopes[b * p.alibi_batch_stride + h * p.alibi_head_stride] * kLog2e),
        shift(seq.len_k - seq.len_q) {}

  TILEFMHA_DEVICE float operator()(float logit2, int i, int j) const {
    const int distance = i + shift - j;
    return logit2 - slope_log2 * float(distance < 0 ? -distance : distance);
  }
};

template <class Cap, class Bias>
struct Logits {
  Cap cap;
  Bias bias;

  TILEFMHA_DEVICE Logits(const FwdParams& p, const SeqInfo& seq, int b, int h)
      : cap(p), bias(p, seq, b, h) {}

  TILEFMHA_DEVICE float operator()(float dot, int i, int j) const { return bias(cap(dot), i, j); }
};

}  // namespace tilefmha::fmha
