// What the dispatcher needs to know about the GPU it plans for.
#pragma once

#include <string>

#include "tilefmha/types.hpp"

namespace tilefmha::runtime {

struct DeviceInfo {
  Arch arch = Arch::sm90;
  int sm_count = 132;
  std::string name;
};

// The kernel arch for a compute capability (e.g. 90 -> sm90, 87 -> sm86): the newest arch we
// build for that the device can run. Throws Error(not_supported) below sm80.
Arch arch_for_compute_capability(int compute_capability);

// The device of the current CUDA context (requires a GPU and driver).
DeviceInfo query_current_device();

}  // namespace tilefmha::runtime
