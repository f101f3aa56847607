// What the C++ examples share: an owning host buffer behind a TensorView, deterministic random
// fill, the comparison of a [batch, seq, head, dim] output with the formula, and attention of one
// query row written directly from the formula O_i = sum_j softmax_j(scale * q_i . k_j) v_j, which
// every example checks the engine against.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "tilefmha/tensor.hpp"

namespace examples {

using tilefmha::DType;
using tilefmha::TensorView;

// Host memory plus a view over it; the view is what the engine sees.
struct HostBuffer {
  std::vector<std::byte> bytes;
  TensorView view;

  HostBuffer(DType dtype, std::initializer_list<int64_t> shape) {
    int64_t count = 1;
    for (int64_t extent : shape) count *= extent;
    bytes.resize(static_cast<size_t>(count * tilefmha::dtype_size(dtype)));
    view = tilefmha::contiguous_view(bytes.data(), dtype, shape);
  }
  // Not copyable: the view points into this object's bytes.
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  double at(int64_t element) const {
    return tilefmha::numeric::load(view.data, view.dtype, element);
  }
  void set(int64_t element, double value) {
    tilefmha::numeric::store(view.data, view.dtype, element, value);
  }
  int64_t size() const { return view.numel(); }
};

// Uniform values in [-1, 1), rounded to the buffer's dtype by the store; a fixed seed keeps the
// examples' printed errors reproducible.
inline void fill_uniform(HostBuffer& buffer, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int64_t e = 0; e < buffer.size(); ++e) buffer.set(e, uniform(rng));
}

// One output row from the formula: `key(j, c)` and `value(j, c)` read key j's elements, so the
// same function serves contiguous, variable-length and paged keys.
inline std::vector<double> attend_row(const std::vector<double>& query, int64_t key_count,
                                      int64_t hdim_v, double scale,
                                      const std::function<double(int64_t, int64_t)>& key,
                                      const std::function<double(int64_t, int64_t)>& value) {
  std::vector<double> logits(static_cast<size_t>(key_count));
  double largest = -INFINITY;
  for (int64_t j = 0; j < key_count; ++j) {
    double dot = 0.0;
    for (size_t c = 0; c < query.size(); ++c) dot += query[c] * key(j, static_cast<int64_t>(c));
    logits[j] = scale * dot;
    largest = std::max(largest, logits[j]);
  }
  double total = 0.0;
  for (double& logit : logits) total += (logit = std::exp(logit - largest));
  std::vector<double> out(static_cast<size_t>(hdim_v), 0.0);
  for (int64_t j = 0; j < key_count; ++j)
    for (int64_t c = 0; c < hdim_v; ++c) out[c] += logits[j] / total * value(j, c);
  return out;
}

// Reads row [b, s, h, :] of a logical [batch, seq, head, dim] view as doubles.
inline std::vector<double> read_row(const TensorView& view, int64_t b, int64_t s, int64_t h) {
  std::vector<double> row(static_cast<size_t>(view.shape[3]));
  for (int64_t c = 0; c < view.shape[3]; ++c) row[c] = tilefmha::numeric::load(view, {b, s, h, c});
  return row;
}

// Q, K, V and O of one forward problem in [batch, seq, head, dim]; K and V have their own
// sequence length and head count.
struct BshdBuffers {
  HostBuffer q, k, v, o;
  BshdBuffers(DType dtype, DType out_dtype, int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
              int64_t nhead_q, int64_t nhead_k, int64_t hdim)
      : q(dtype, {batch, seqlen_q, nhead_q, hdim}),
        k(dtype, {batch, seqlen_k, nhead_k, hdim}),
        v(dtype, {batch, seqlen_k, nhead_k, hdim}),
        o(out_dtype, {batch, seqlen_q, nhead_q, hdim}) {}
  // Q, K and V from seeds first_seed, first_seed + 1 and first_seed + 2.
  void fill_inputs(uint64_t first_seed) {
    fill_uniform(q, first_seed);
    fill_uniform(k, first_seed + 1);
    fill_uniform(v, first_seed + 2);
  }
};

// Multiplies every element read from Q, K and V before the formula sees it: fp8 descales, else 1.
struct Descales {
  double q = 1.0, k = 1.0, v = 1.0;
};

// Tracks the largest |engine - formula| and reports it against a tolerance.
struct MaxError {
  double value = 0.0;
  void add(double engine, double formula) {
    const double error = std::abs(engine - formula);
    if (!(error <= value)) value = error;  // a NaN sticks
  }
  // Prints "<what>: max abs error E (tolerance T) ok|FAILED" and returns whether it passed.
  bool report(const char* what, double tolerance) const {
    const bool ok = value <= tolerance;
    std::printf("%s: max abs error %.3g (tolerance %.3g) %s\n", what, value, tolerance,
                ok ? "ok" : "FAILED");
    return ok;
  }
};

// Compares every row [b, i, h, :] of O with the formula and returns the largest error: query i
// sees the first `visible(i)` keys, and query head h reads K/V head h / (nhead_q / nhead_k)
// (grouped-query attention when K/V have fewer heads). Scale 1/sqrt(head dim).
inline MaxError formula_error(const BshdBuffers& x, const std::function<int64_t(int64_t)>& visible,
                              Descales descales = {}) {
  const TensorView &q = x.q.view, &k = x.k.view, &v = x.v.view, &o = x.o.view;
  const int64_t hdim = q.shape[3], group = q.shape[2] / k.shape[2];
  MaxError error;
  for (int64_t b = 0; b < q.shape[0]; ++b)
    for (int64_t h = 0; h < q.shape[2]; ++h)
      for (int64_t i = 0; i < q.shape[1]; ++i) {
        const int64_t kv_head = h / group;
        auto query = read_row(q, b, i, h);
        for (double& element : query) element *= descales.q;
        const auto expected = attend_row(
            query, visible(i), hdim, 1.0 / std::sqrt(double(hdim)),
            [&](int64_t j, int64_t c) {
              return tilefmha::numeric::load(k, {b, j, kv_head, c}) * descales.k;
            },
            [&](int64_t j, int64_t c) {
              return tilefmha::numeric::load(v, {b, j, kv_head, c}) * descales.v;
            });
        for (int64_t c = 0; c < hdim; ++c)
          error.add(tilefmha::numeric::load(o, {b, i, h, c}), expected[c]);
      }
  return error;
}

}  // namespace examples
