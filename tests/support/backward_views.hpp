// Test support: the host views a backward case is built from, shared by the emulated and the GPU
// backward tests: a poisoned view shaped like another, dBias storage for a (possibly broadcast)
// bias, and a bias broadcast along zero strides.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "support/forward_problems.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/tensor.hpp"

namespace tilefmha::testing {

inline TensorView like(TensorPool& pool, const TensorView& v) {
  return pool.filled(v.dtype, {v.shape[0], v.shape[1], v.shape[2], v.shape[3]}, kUnwritten);
}

// dBias storage like `bias`: dense over the dims the bias keeps, zero strides where it
// broadcasts (as the Python front end allocates it).
inline TensorView dbias_like(TensorPool& pool, const TensorView& bias, DType dtype) {
  auto kept = [&](int d) { return bias.stride[d] == 0 ? int64_t{1} : bias.shape[d]; };
  TensorView view = pool.filled(dtype, {kept(0), kept(1), kept(2), kept(3)}, kUnwritten);
  for (int d = 0; d < 4; ++d) {
    if (bias.stride[d] != 0) continue;
    view.shape[d] = bias.shape[d];
    view.stride[d] = 0;
  }
  return view;
}

// A bias shared along the dims where `shape` exceeds the storage `kept` (zero strides).
inline TensorView broadcast_bias(TensorPool& pool, DType dtype, std::initializer_list<int64_t> kept,
                                 std::initializer_list<int64_t> shape) {
  TensorView bias = pool.uniform(dtype, kept, -2, 2);
  int d = 0;
  for (int64_t extent : shape) {
    if (bias.shape[d] != extent) {
      bias.shape[d] = extent;
      bias.stride[d] = 0;
    }
    ++d;
  }
  return bias;
}

}  // namespace tilefmha::testing
