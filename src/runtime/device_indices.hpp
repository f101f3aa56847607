// Device copies of a problem's index vectors (seqstart_q, seqstart_k, seqlen_k_per_batch): they
// live in host vectors even in a problem whose tensors are device views, so every launch that
// reads them uploads them first.
#pragma once

#include <memory>
#include <vector>

#include "jit/module.hpp"
#include "runtime/fwd_params.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// The uploads stay allocated for the life of the object: a launch that reads them must finish
// before it goes.
class DeviceIndexVectors {
 public:
  // Needs a current CUDA context (jit::GpuContext).
  explicit DeviceIndexVectors(const Problem& host);

  // Null where the problem's vector is empty.
  const FwdDeviceIndices& pointers() const { return pointers_; }
  // True when the problem has no index vectors (nothing was uploaded).
  bool empty() const { return buffers_.empty(); }

 private:
  const int64_t* upload(const std::vector<int64_t>& values);
  std::vector<std::unique_ptr<jit::DeviceBuffer>> buffers_;
  FwdDeviceIndices pointers_;
};

}  // namespace tilefmha::runtime
