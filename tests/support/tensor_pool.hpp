// Test support: a pool that owns every host tensor of a test problem and hands out views, plus
// Q/K/V/O views in the layouts the forward tests sweep.
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <random>

#include "support/host_tensor.hpp"

namespace tilefmha::testing {

// bshd / bhsd: the view helpers; padded: bshd memory with every row, head and batch followed by
// unused elements, so that no stride equals the packed one.
enum class QkvLayout { bshd, bhsd, padded };

class TensorPool {
 public:
  explicit TensorPool(uint64_t seed) : rng_(seed) {}

  std::mt19937_64& rng() { return rng_; }

  // Contiguous tensor of `shape`, every element uniform in [lo, hi) (rounded to dtype).
  TensorView uniform(DType dtype, std::initializer_list<int64_t> shape, double lo, double hi) {
    HostTensor& t = tensors_.emplace_back(dtype, shape);
    t.fill_uniform(rng_, lo, hi);
    return t.view();
  }
  // Contiguous tensor of `shape` with every element `value`.
  TensorView filled(DType dtype, std::initializer_list<int64_t> shape, double value) {
    HostTensor& t = tensors_.emplace_back(dtype, shape);
    t.fill(value);
    return t.view();
  }
  // `elements` of storage seen through explicit shape and strides, uniform in [lo, hi).
  TensorView strided(DType dtype, int64_t elements, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> stride, double lo, double hi) {
    HostTensor& t = tensors_.emplace_back(dtype, elements, shape, stride);
    t.fill_uniform(rng_, lo, hi);
    return t.view();
  }

  // Logical [batch, seq, heads, dim] in `layout`, uniform in [lo, hi).
  TensorView qkv(DType dtype, QkvLayout layout, int64_t batch, int64_t seq, int64_t heads,
                 int64_t dim, double lo = -1.0, double hi = 1.0) {
    switch (layout) {
      case QkvLayout::bshd: return uniform(dtype, {batch, seq, heads, dim}, lo, hi);
      case QkvLayout::bhsd: {
        TensorView view = uniform(dtype, {batch, heads, seq, dim}, lo, hi);
        view.shape = {batch, seq, heads, dim, 0};
        view.stride = {heads * seq * dim, dim, seq * dim, 1, 0};
        return view;
      }
      case QkvLayout::padded: {
        const int64_t head_stride = dim + 3;
        const int64_t seq_stride = heads * head_stride + 5;
        const int64_t batch_stride = seq * seq_stride + 7;
        return strided(dtype, batch * batch_stride, {batch, seq, heads, dim},
                       {batch_stride, seq_stride, head_stride, 1}, lo, hi);
      }
    }
    return {};
  }

 private:
  std::mt19937_64 rng_;
  std::deque<HostTensor> tensors_;  // deque: views stay valid as the pool grows
};

}  // namespace tilefmha::testing
