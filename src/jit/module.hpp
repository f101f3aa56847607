// RAII handles over the dlopen'd driver: a device's primary context, a loaded cubin, device
// memory and kernel launches. Every driver call is checked; failures throw Error(runtime)
// naming the call. Construct a GpuContext first: the others need it current on the thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "jit/cuda_driver.hpp"

namespace tilefmha::jit {

// The primary context of one device (the one the CUDA runtime shares), retained for the
// object's lifetime and made current on the constructing thread.
class GpuContext {
 public:
  explicit GpuContext(int device_ordinal = 0);
  ~GpuContext();
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;

  // Required on every other thread that uses this context.
  void make_current() const;
  void synchronize() const;
  int compute_capability() const;  // e.g. 90
  int multiprocessor_count() const;
  std::string device_name() const;

 private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

class LoadedModule {
 public:
  // cuModuleLoadData on the current context; `cubin` may be freed afterwards.
  explicit LoadedModule(std::span<const char> cubin);
  ~LoadedModule();
  LoadedModule(LoadedModule&& other) noexcept;
  LoadedModule& operator=(LoadedModule&& other) noexcept;
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // Throws Error(runtime) naming the kernel when the module has no such (extern "C") kernel.
  CUfunction function(const std::string& kernel_name) const;

 private:
  CUmodule module_ = nullptr;
};

struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_shared_bytes = 0;  // above 48 KiB the kernel's limit is raised first
};

// `arguments[i]` points at the i-th kernel parameter's value.
void launch_kernel(CUfunction function, const LaunchShape& shape, void** arguments,
                   CUstream stream = nullptr);

class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr address() const { return address_; }
  int64_t bytes() const { return bytes_; }
  // Sizes must not exceed the buffer; throws Error(invalid_argument) naming both sizes.
  void copy_from_host(std::span<const std::byte> source);
  void copy_to_host(std::span<std::byte> destination) const;
  void fill_bytes(unsigned char value);

 private:
  CUdeviceptr address_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace tilefmha::jit
