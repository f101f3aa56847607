// Test support: owning host tensors with views, filled from a seeded generator.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "tilefmha/tensor.hpp"

namespace tilefmha::testing {

// Owns the bytes behind a TensorView; view() can be re-strided by the test.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape)
      : bytes_(static_cast<size_t>(count(shape) * dtype_size(dtype))),
        view_(contiguous_view(nullptr, dtype, shape)) {
    view_.data = bytes_.data();
  }
  // Storage for `elements` elements viewed through explicit shape and strides (e.g. bhsd,
  // broadcast, padded rows).
  HostTensor(DType dtype, int64_t elements, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> stride)
      : bytes_(static_cast<size_t>(elements * dtype_size(dtype))),
        view_(contiguous_view(nullptr, dtype, shape)) {
    view_.data = bytes_.data();
    int d = 0;
    for (int64_t s : stride) view_.stride[d++] = s;
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&& other) noexcept { *this = std::move(other); }
  HostTensor& operator=(HostTensor&& other) noexcept {
    bytes_ = std::move(other.bytes_);
    view_ = other.view_;
    view_.data = bytes_.empty() ? nullptr : bytes_.data();
    return *this;
  }

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  int64_t elements() const { return static_cast<int64_t>(bytes_.size()) / dtype_size(view_.dtype); }

  // Every stored element (including padding) drawn uniformly from [lo, hi), rounded to dtype.
  void fill_uniform(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t e = 0; e < elements(); ++e) numeric::store(view_.data, view_.dtype, e, dist(rng));
  }
  void fill(double value) {
    for (int64_t e = 0; e < elements(); ++e) numeric::store(view_.data, view_.dtype, e, value);
  }
  double at(std::initializer_list<int64_t> index) const { return numeric::load(view_, index); }
  void set(std::initializer_list<int64_t> index, double value) {
    numeric::store(view_, index, value);
  }

 private:
  static int64_t count(std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  std::vector<uint8_t> bytes_;
  TensorView view_;
};

}  // namespace tilefmha::testing
