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
  // Peak SM and memory clocks in kHz as the driver reports them (not the current clocks).
  int clock_rate_khz() const;
  int memory_clock_rate_khz() const;

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
  // Set by prepare_launch: the function's limits already allow dynamic_shared_bytes and the
  // cluster size, so a launch skips the attribute calls (a plan raises them once, not on every
  // run).
  bool function_limits_raised = false;
  // Programmatic dependent launch (sm_90+): the grid may be scheduled while the stream's previous
  // kernel still runs, once that kernel's CTAs signal (griddepcontrol.launch_dependents), so its
  // launch latency hides under their tail. Only for kernels that execute griddepcontrol.wait
  // before their first global memory access: that waits for the previous grid to complete and
  // its writes to be visible.
  bool programmatic_dependency = false;
  // Cooperative launch: every CTA of the grid is resident at once, or the launch fails
  // (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) instead of running. For grids whose CTAs wait on
  // one another in an order that launch order alone does not make safe.
  bool cooperative = false;
  // Thread block clusters of cluster[0] x cluster[1] x cluster[2] CTAs (sm_90+); {1, 1, 1}: none.
  // The grid must divide into them.
  unsigned cluster[3] = {1, 1, 1};
};

// Raises `function`'s dynamic shared-memory limit and cluster size limit to what `shape` needs
// and marks the shape.
void prepare_launch(CUfunction function, LaunchShape& shape);

// The clusters of `shape.cluster` CTAs that the device holds at once for `function` launched with
// `shape`'s block and shared memory (cuOccupancyMaxActiveClusters); -1 where the driver cannot
// say.
int64_t max_active_clusters(CUfunction function, const LaunchShape& shape);

// `arguments[i]` points at the i-th kernel parameter's value.
void launch_kernel(CUfunction function, const LaunchShape& shape, void** arguments,
                   CUstream stream = nullptr);

// Queues a copy of `source` to device address `destination` on `stream`. Pageable host memory
// is staged by the driver before the call returns, so `source` may go away at once.
void copy_to_device_async(CUdeviceptr destination, std::span<const std::byte> source,
                          CUstream stream);

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
  // Queued on `stream`; returns at once.
  void fill_bytes_async(unsigned char value, CUstream stream);

 private:
  CUdeviceptr address_ = 0;
  int64_t bytes_ = 0;
};

// A non-blocking stream of the current context: work on it does not wait for the legacy
// default stream, so timings see only what was queued on it.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream handle() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

// A timing event of the current context.
class Event {
 public:
  // `timing` false makes an ordering-only event, cheaper to record.
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(CUstream stream);
  // Makes later work on `stream` wait for this event's last record (no host wait).
  void wait_on(CUstream stream) const;
  void synchronize() const;
  CUevent handle() const { return event_; }

 private:
  CUevent event_ = nullptr;
};

// GPU time between two recorded events (both complete), in milliseconds.
float elapsed_milliseconds(const Event& start, const Event& end);

}  // namespace tilefmha::jit
