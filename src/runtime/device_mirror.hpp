// A device copy of a host Problem: every tensor the problem names (append-KV's new tokens and RoPE
// tables too) is copied to GPU memory with the same shape and strides, outputs are poisoned (all
// bits set: NaN in every float dtype) so an element a kernel forgets to write cannot pass
// validation, and results copy back. Append-KV's caches and Q are copied, not poisoned: it
// writes into them in place.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "jit/module.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// The byte every output buffer starts as: NaN in fp16, bf16 and fp32.
inline constexpr unsigned char kPoisonByte = 0xFF;

class DeviceMirror {
 public:
  // Needs a current CUDA context (jit::GpuContext).
  explicit DeviceMirror(const Problem& host);

  // The problem with every view pointing at device memory.
  const Problem& device_problem() const { return device_; }

  // Copies the outputs of the problem's family (O, LSE; a backward's dQ, dK, dV, dBias, D and
  // dQ accumulator) back into the host problem's views.
  void copy_outputs_to(const Problem& host) const;
  // Sets every byte of the outputs' buffers to kPoisonByte again (before a rerun).
  void poison_outputs() const;

  // The whole buffer behind one of device_problem()'s views, padding included, with the view
  // re-pointed at the host copy (moving keeps the view valid; a copy would still point at the
  // original's bytes).
  struct HostBytes {
    std::vector<std::byte> bytes;
    TensorView view;
  };
  // Throws Error(invalid_argument) unless `device_view` is one of this mirror's views.
  HostBytes download(const TensorView& device_view) const;

 private:
  TensorView mirror(const TensorView& host, bool poison);
  // The buffer that starts at `device_data`, or null.
  jit::DeviceBuffer* find_buffer(const void* device_data) const;
  Problem device_;
  std::vector<std::unique_ptr<jit::DeviceBuffer>> buffers_;
};

}  // namespace tilefmha::runtime
