// A device copy of a host Problem: every tensor the problem names is copied to GPU memory with
// the same shape and strides, outputs are poisoned (all bits set: NaN in every float dtype) so
// an element a kernel forgets to write cannot pass validation, and results copy back.
#pragma once

#include <memory>
#include <vector>

#include "jit/module.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

class DeviceMirror {
 public:
  // Needs a current CUDA context (jit::GpuContext).
  explicit DeviceMirror(const Problem& host);

  // The problem with every view pointing at device memory.
  const Problem& device_problem() const { return device_; }

  // Copies the outputs of the problem's family (O, LSE) back into the host problem's views.
  void copy_outputs_to(const Problem& host) const;

 private:
  TensorView mirror(const TensorView& host, bool poison);
  Problem device_;
  std::vector<std::unique_ptr<jit::DeviceBuffer>> buffers_;
};

}  // namespace tilefmha::runtime
