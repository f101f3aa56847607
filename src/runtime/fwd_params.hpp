// Problem -> FwdParams of the sm80_mma forward kernel. The problem's tensors must be device
// views (MemorySpace::device); its index metadata lives in host vectors, so the caller uploads
// it and passes the device copies here.
#pragma once

#include <cstdint>

#include "fmha/fwd_params.h"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Device copies of the problem's index vectors (int64, same lengths); null where the problem's
// vector is empty.
struct FwdDeviceIndices {
  const int64_t* seqstart_q = nullptr;
  const int64_t* seqstart_k = nullptr;
  const int64_t* seqlen_k_per_batch = nullptr;
};

// Validates the problem, then checks what the kernel additionally needs, throwing
// Error(invalid_problem) or Error(not_supported) naming the field and value:
//   * family fwd, dtype fp16 or bf16;
//   * every tensor the kernel reads or writes in device memory;
//   * Q/K/V/O: dim stride 1, other strides multiples of 8 elements, data 16-byte aligned and
//     head dims multiples of 8 (the kernel moves 16-byte chunks);
//   * the device index arrays the problem's mode needs.
fmha::FwdParams make_fwd_params(const Problem& problem, const FwdDeviceIndices& indices);

}  // namespace tilefmha::runtime
