#include "environment.hpp"

#include <array>

#include "jit/cuda_driver.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/nvrtc_api.hpp"
#include "jit/target_arch.hpp"
#include "runtime/device_info.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::python {
namespace py = pybind11;

namespace {

int attribute(const jit::CudaDriverApi& api, int code, jit::CUdevice device, const char* what) {
  int value = 0;
  jit::check_cuda(api.device_get_attribute(&value, code, device), what);
  return value;
}

}  // namespace

py::list gpu_devices() {
  // Attribute queries only: no context is created, so this neither allocates device memory nor
  // changes which context is current for PyTorch.
  const jit::CudaDriverApi& api = jit::cuda_driver();
  int count = 0;
  jit::check_cuda(api.device_get_count(&count), "cuDeviceGetCount");
  py::list devices;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    jit::CUdevice device = 0;
    jit::check_cuda(api.device_get(&device, ordinal), "cuDeviceGet");
    std::array<char, 256> name{};
    jit::check_cuda(api.device_get_name(name.data(), static_cast<int>(name.size()), device),
                    "cuDeviceGetName");
    const int capability = 10 * attribute(api, jit::cu_device_attribute_compute_capability_major,
                                          device, "cuDeviceGetAttribute(major)") +
                           attribute(api, jit::cu_device_attribute_compute_capability_minor, device,
                                     "cuDeviceGetAttribute(minor)");
    py::dict info;
    info["ordinal"] = ordinal;
    info["name"] = std::string(name.data());
    info["compute_capability"] = capability;
    info["sm_count"] = attribute(api, jit::cu_device_attribute_multiprocessor_count, device,
                                 "cuDeviceGetAttribute(multiprocessor count)");
    try {
      const Arch arch = runtime::arch_for_compute_capability(capability);
      info["arch"] = std::string(to_string(arch));
      info["nvrtc_target"] = jit::nvrtc_target(arch);
    } catch (const Error&) {  // below sm80: the engine builds nothing for it
      info["arch"] = py::none();
      info["nvrtc_target"] = py::none();
    }
    devices.append(info);
  }
  return devices;
}

py::dict driver_info() {
  const jit::CudaDriverApi& api = jit::cuda_driver();
  py::dict info;
  info["version"] = api.driver_version;
  info["library"] = api.library_path;
  return info;
}

py::dict nvrtc_info() {
  const jit::NvrtcApi& api = jit::nvrtc_api();
  py::dict info;
  info["version"] = jit::nvrtc_version_string();
  info["library"] = api.library_path;
  return info;
}

std::string default_cache_directory() {
  return jit::KernelCache::default_directory().string();
}

}  // namespace tilefmha::python
