// Contiguous host memory shaped like a view: where the CPU reference writes the outputs that a
// GPU result is compared with.
#pragma once

#include <cstddef>
#include <vector>

#include "tilefmha/tensor.hpp"

namespace tilefmha::cli {

struct HostBuffer {
  std::vector<std::byte> bytes;
  TensorView view;  // `like`'s shape and dtype, row-major strides; empty when `like` is

  explicit HostBuffer(const TensorView& like) : view(like) {
    if (like.empty()) return;
    int64_t running = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
      view.stride[d] = running;
      running *= view.shape[d];
    }
    bytes.resize(static_cast<size_t>(running * dtype_size(view.dtype)));
    view.data = bytes.data();
  }
  // The view points into `bytes`: a copy would point at the original's.
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
};

}  // namespace tilefmha::cli
