// Test support: forward attention written directly from the semantics documented in
// problem.hpp, in long double, sharing no code with the reference (no reference::detail), and
// the comparison of a computed O / LSE against it in units of the output dtype's ulp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/philox.h"
#include "core/numeric.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::testing {

// O [batch, nhead_q, max seqlen_q, hdim_v] and LSE [batch, nhead_q, max seqlen_q] of every
// sequence, local query index.
class NaiveForward {
 public:
  explicit NaiveForward(const Problem& p)
      : p_(p),
        o_(p.batch * p.nhead_q * p.seqlen_q * p.hdim_v, 0.0),
        lse_(p.batch * p.nhead_q * p.seqlen_q, 0.0) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.nhead_q; ++h)
        for (int64_t i = 0; i < queries(b); ++i) compute_row(b, h, i);
  }

  int64_t queries(int64_t b) const {
    return p_.mode == Mode::group ? p_.seqstart_q[b + 1] - p_.seqstart_q[b] : p_.seqlen_q;
  }
  int64_t keys(int64_t b) const {
    if (!p_.seqlen_k_per_batch.empty()) return p_.seqlen_k_per_batch[b];
    if (p_.mode == Mode::group) return p_.seqstart_k[b + 1] - p_.seqstart_k[b];
    return p_.seqlen_k;
  }
  double o(int64_t b, int64_t h, int64_t i, int64_t d) const {
    return o_[((b * p_.nhead_q + h) * p_.seqlen_q + i) * p_.hdim_v + d];
  }
  double lse(int64_t b, int64_t h, int64_t i) const {
    return lse_[(b * p_.nhead_q + h) * p_.seqlen_q + i];
  }

 private:
  // Dequantized element d of token t of sequence b, head `head` of a Q/K/V view.
  long double element(const TensorView& view, const TensorView& block_scales, double tensor_scale,
                      int64_t b, int64_t head, int64_t t, int64_t d, bool is_query) const {
    const int64_t start =
        p_.mode == Mode::group ? (is_query ? p_.seqstart_q[b] : p_.seqstart_k[b]) : 0;
    const int64_t batch_index = p_.mode == Mode::group ? 0 : b;
    long double x = numeric::load(view, {batch_index, start + t, head, d});
    if (p_.fp8.kind == Fp8ScaleKind::per_tensor) x *= tensor_scale;
    if (p_.fp8.kind == Fp8ScaleKind::per_block)
      x *= numeric::load(block_scales, {b, head, t / 128});
    return x;
  }

  bool is_visible(int64_t b, int64_t i, int64_t j) const {
    const MaskSpec& m = p_.mask;
    if (m.kind == MaskKind::none) return true;
    const int64_t diagonal = m.align == MaskAlign::bottom_right ? i + keys(b) - queries(b) : i;
    const int64_t last = m.window_right < 0 ? keys(b) - 1 : diagonal + m.window_right;
    const int64_t first = m.window_left < 0 ? 0 : diagonal - m.window_left;
    if (j > last) return false;
    return j >= first || j < m.sink_tokens;
  }

  long double logit(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const int64_t hk = h * p_.nhead_k / p_.nhead_q;
    long double dot = 0;
    for (int64_t d = 0; d < p_.hdim_q; ++d)
      dot += element(p_.q, p_.fp8.q_block, p_.fp8.q_descale, b, h, i, d, true) *
             element(p_.k, p_.fp8.k_block, p_.fp8.k_descale, b, hk, j, d, false);
    const long double scale =
        p_.softmax_scale ? *p_.softmax_scale : 1.0L / std::sqrt((long double)p_.hdim_q);
    long double s = scale * dot;
    if (p_.softcap > 0) s = p_.softcap * std::tanh(s / p_.softcap);
    if (p_.bias_kind == BiasKind::elementwise) s += numeric::load(p_.bias, {b, h, i, j});
    if (p_.bias_kind == BiasKind::alibi) {
      const TensorView& sl = p_.alibi_slopes;
      const double slope = sl.rank == 1 ? numeric::load(sl, {h}) : numeric::load(sl, {b, h});
      s -= slope * std::fabs(static_cast<long double>(i + keys(b) - queries(b) - j));
    }
    return s;
  }

  long double dropout_scale(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (p_.dropout.p <= 0) return 1;
    const uint32_t threshold = static_cast<uint32_t>(std::ldexp(p_.dropout.p, 32));
    const uint32_t word =
        philox::dropout_word(p_.dropout.seed, p_.dropout.offset, b, h, p_.nhead_q, i, j);
    return word < threshold ? 0.0L : 1.0L / (1.0L - p_.dropout.p);
  }

  void compute_row(int64_t b, int64_t h, int64_t i) {
    std::vector<int64_t> key;
    std::vector<long double> s;
    for (int64_t j = 0; j < keys(b); ++j) {
      if (!is_visible(b, i, j)) continue;
      key.push_back(j);
      s.push_back(logit(b, h, i, j));
    }
    const bool sink = !p_.sink_logits.empty();
    const long double sink_value = sink ? numeric::load(p_.sink_logits, {h}) : 0.0;
    double& lse = lse_[(b * p_.nhead_q + h) * p_.seqlen_q + i];
    if (key.empty()) {
      lse = sink ? static_cast<double>(sink_value) : -std::numeric_limits<double>::infinity();
      return;
    }
    long double top = *std::max_element(s.begin(), s.end());
    if (sink) top = std::max(top, sink_value);
    long double sum = sink ? std::exp(sink_value - top) : 0.0L;
    for (long double x : s) sum += std::exp(x - top);
    lse = static_cast<double>(top + std::log(sum));
    const int64_t hk = h * p_.nhead_k / p_.nhead_q;
    for (int64_t d = 0; d < p_.hdim_v; ++d) {
      long double acc = 0;
      for (size_t n = 0; n < key.size(); ++n)
        acc += std::exp(s[n] - top) / sum * dropout_scale(b, h, i, key[n]) *
               element(p_.v, p_.fp8.v_block, p_.fp8.v_descale, b, hk, key[n], d, false);
      o_[((b * p_.nhead_q + h) * p_.seqlen_q + i) * p_.hdim_v + d] = static_cast<double>(acc);
    }
  }

  const Problem& p_;
  std::vector<double> o_, lse_;
};

// Spacing of `dtype` values at magnitude |x| (normal or subnormal).
inline double ulp_of(DType dtype, double x) {
  int mantissa = 23, min_exponent = -126;
  if (dtype == DType::fp16) mantissa = 10, min_exponent = -14;
  if (dtype == DType::bf16) mantissa = 7;
  const int exponent = x == 0 ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, exponent - mantissa);
}

// Expects `actual` (a stored dtype value) within one ulp of `expected` rounded to dtype, plus
// `slack` for results that went through rounded intermediates.
inline ::testing::AssertionResult within_one_ulp(DType dtype, double actual, double expected,
                                                 double slack = 0.0) {
  const double rounded = numeric::round_to(dtype, expected);
  if (std::isnan(actual)) return ::testing::AssertionFailure() << "NaN, expected " << rounded;
  if (std::isinf(rounded) || std::isinf(actual)) {
    if (actual == rounded) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << actual << " vs " << rounded;
  }
  const double tolerance = ulp_of(dtype, std::max(std::fabs(actual), std::fabs(rounded))) + slack;
  if (std::fabs(actual - rounded) <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << actual << " vs " << rounded << " (exact " << expected << ", ulp " << tolerance << ")";
}

// O (and LSE when return_lse) of `p` as computed, against the naive formula; returns the number
// of compared elements so that a test can assert it compared something.
inline int64_t expect_matches_naive(const Problem& p, const NaiveForward& naive) {
  int64_t compared = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t batch_index = p.mode == Mode::group ? 0 : b;
    const int64_t start = p.mode == Mode::group ? p.seqstart_q[b] : 0;
    for (int64_t h = 0; h < p.nhead_q; ++h) {
      for (int64_t i = 0; i < naive.queries(b); ++i) {
        for (int64_t d = 0; d < p.hdim_v; ++d, ++compared) {
          const double actual = numeric::load(p.o, {batch_index, start + i, h, d});
          EXPECT_TRUE(within_one_ulp(p.out_dtype, actual, naive.o(b, h, i, d)))
              << "O b=" << b << " h=" << h << " i=" << i << " d=" << d;
        }
        if (p.return_lse) {
          const double actual = numeric::load(p.lse, {batch_index, h, start + i});
          EXPECT_TRUE(within_one_ulp(DType::fp32, actual, naive.lse(b, h, i)))
              << "LSE b=" << b << " h=" << h << " i=" << i;
        }
      }
    }
  }
  return compared;
}

}  // namespace tilefmha::testing
