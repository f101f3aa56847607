#include "runtime/device_info.hpp"

#include "jit/module.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {

Arch arch_for_compute_capability(int compute_capability) {
  if (compute_capability >= 90) return Arch::sm90;
  if (compute_capability >= 89) return Arch::sm89;
  if (compute_capability >= 86) return Arch::sm86;
  if (compute_capability >= 80) return Arch::sm80;
  throw Error(ErrorKind::not_supported,
              "compute capability " + std::to_string(compute_capability / 10) + "." +
                  std::to_string(compute_capability % 10) + " is below sm80, the oldest target");
}

DeviceInfo query_current_device() {
  jit::GpuContext context;
  return {arch_for_compute_capability(context.compute_capability()), context.multiprocessor_count(),
          context.device_name()};
}

}  // namespace tilefmha::runtime
