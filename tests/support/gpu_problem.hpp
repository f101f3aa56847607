// Test support for kernels run on a GPU: device copies of host problems with poisoned outputs,
// the element-wise comparison of a downloaded output with the reference's, the check that the
// padding around an output kept its poison, and views in gapped memory.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor_iteration.hpp"
#include "runtime/device_indices.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/tolerance.hpp"
#include "support/gpu_availability.hpp"
#include "support/tensor_pool.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::testing {

// A host problem's tensors and index vectors on the device; outputs poisoned (NaN).
class DeviceProblem {
 public:
  explicit DeviceProblem(const Problem& host) : mirror_(host), indices_(host) {}

  const Problem& problem() const { return mirror_.device_problem(); }
  const runtime::FwdDeviceIndices& indices() const { return indices_.pointers(); }
  // The whole buffer behind one of problem()'s views, with the view re-pointed at it.
  runtime::DeviceMirror::HostBytes download(const TensorView& device) const {
    return mirror_.download(device);
  }

 private:
  runtime::DeviceMirror mirror_;
  runtime::DeviceIndexVectors indices_;
};

// Element-wise agreement of `actual` (a kernel's output) with `expected` (the reference's).
inline runtime::Agreement compare(const TensorView& expected, const TensorView& actual, double atol,
                                  double rtol) {
  runtime::Agreement agreement;
  agreement.add(actual, expected, {atol, rtol});
  return agreement;
}

// Bytes of the downloaded buffer outside the logical elements of its view that lost their
// poison.
inline int64_t clobbered_padding(const runtime::DeviceMirror::HostBytes& download) {
  const int64_t element = dtype_size(download.view.dtype);
  std::vector<bool> logical(download.bytes.size() / element, false);
  for_each_element(download.view, [&](int64_t, int64_t offset) { logical[offset] = true; });
  int64_t clobbered = 0;
  for (size_t e = 0; e < logical.size(); ++e) {
    if (logical[e]) continue;
    for (int64_t b = 0; b < element; ++b)
      clobbered += download.bytes[e * element + b] != std::byte{runtime::kPoisonByte};
  }
  return clobbered;
}

// bshd memory with gaps after every head, row and batch; strides stay multiples of 8 elements
// (16 bytes of fp16 or bf16), as the kernels' 16-byte loads and TMA need.
inline TensorView gapped(TensorPool& pool, DType dtype, int64_t batch, int64_t seq, int64_t heads,
                         int64_t dim) {
  const int64_t head_stride = dim + 8;
  const int64_t seq_stride = heads * head_stride + 16;
  const int64_t batch_stride = seq * seq_stride + 24;
  return pool.strided(dtype, batch * batch_stride, {batch, seq, heads, dim},
                      {batch_stride, seq_stride, head_stride, 1}, -1, 1);
}

}  // namespace tilefmha::testing
