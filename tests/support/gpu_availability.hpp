// Test support: what the GPU and compile-only tests need from the machine.
#pragma once

#include <string>

#include "jit/cuda_driver.hpp"
#include "jit/nvrtc_api.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::testing {

// Why kernels cannot be compiled and run here (no driver, no GPU, no NVRTC); empty when they
// can. GPU tests skip with this text.
inline std::string gpu_skip_reason() {
  std::string reason = jit::gpu_unavailable_reason();
  if (!reason.empty()) return reason;
  try {
    jit::nvrtc_api();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// Whether NVRTC loads: compile-only tests need nothing else.
inline bool nvrtc_available() {
  try {
    jit::nvrtc_api();
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace tilefmha::testing
