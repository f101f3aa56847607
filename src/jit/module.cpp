#include "jit/module.hpp"

#include <utility>

#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

// Kernels may use 48 KiB of dynamic shared memory without opting in.
constexpr unsigned default_dynamic_shared_limit = 48 * 1024;
// Clusters of more CTAs than this launch only where the function opts in.
constexpr unsigned portable_cluster_size = 8;

CuLaunchConfig launch_config(const LaunchShape& shape, CUstream stream,
                             CuLaunchAttribute* attributes, unsigned count) {
  return {shape.grid[0],
          shape.grid[1],
          shape.grid[2],
          shape.block[0],
          shape.block[1],
          shape.block[2],
          shape.dynamic_shared_bytes,
          stream,
          attributes,
          count};
}

// CTAs a cluster of the launch holds (1: no clusters).
unsigned cluster_ctas(const LaunchShape& shape) {
  return shape.cluster[0] * shape.cluster[1] * shape.cluster[2];
}

CuLaunchAttribute cluster_attribute(const LaunchShape& shape) {
  CuLaunchAttribute attribute{};
  attribute.id = cu_launch_attribute_cluster_dimension;
  attribute.value.cluster_dimension = {shape.cluster[0], shape.cluster[1], shape.cluster[2]};
  return attribute;
}

// What a launch of `shape` needs set on the function first: dynamic shared memory past the
// default 48 KiB, and clusters past the portable 8 CTAs (Hopper runs up to 16 when asked).
void raise_function_limits(CUfunction function, const LaunchShape& shape) {
  const CudaDriverApi& api = cuda_driver();
  if (shape.dynamic_shared_bytes > default_dynamic_shared_limit) {
    check_cuda(api.func_set_attribute(function, cu_func_attribute_max_dynamic_shared_size_bytes,
                                      static_cast<int>(shape.dynamic_shared_bytes)),
               "cuFuncSetAttribute(max dynamic shared memory " +
                   std::to_string(shape.dynamic_shared_bytes) + ")");
  }
  if (cluster_ctas(shape) > portable_cluster_size) {
    check_cuda(
        api.func_set_attribute(function, cu_func_attribute_non_portable_cluster_size_allowed, 1),
        "cuFuncSetAttribute(non-portable cluster size " + std::to_string(cluster_ctas(shape)) +
            ")");
  }
}

}  // namespace

GpuContext::GpuContext(int device_ordinal) {
  const CudaDriverApi& api = cuda_driver();
  int count = 0;
  check_cuda(api.device_get_count(&count), "cuDeviceGetCount");
  if (device_ordinal < 0 || device_ordinal >= count) {
    throw Error(ErrorKind::invalid_argument, "device ordinal " + std::to_string(device_ordinal) +
                                                 " out of range: " + std::to_string(count) +
                                                 " GPU(s) present");
  }
  check_cuda(api.device_get(&device_, device_ordinal), "cuDeviceGet");
  check_cuda(api.primary_ctx_retain(&context_, device_), "cuDevicePrimaryCtxRetain");
  make_current();
}

GpuContext::~GpuContext() {
  if (context_ != nullptr) cuda_driver().primary_ctx_release(device_);
}

void GpuContext::make_current() const {
  check_cuda(cuda_driver().ctx_set_current(context_), "cuCtxSetCurrent");
}

void GpuContext::synchronize() const {
  check_cuda(cuda_driver().ctx_synchronize(), "cuCtxSynchronize");
}

int GpuContext::compute_capability() const {
  const CudaDriverApi& api = cuda_driver();
  int major = 0, minor = 0;
  check_cuda(
      api.device_get_attribute(&major, cu_device_attribute_compute_capability_major, device_),
      "cuDeviceGetAttribute(compute capability major)");
  check_cuda(
      api.device_get_attribute(&minor, cu_device_attribute_compute_capability_minor, device_),
      "cuDeviceGetAttribute(compute capability minor)");
  return 10 * major + minor;
}

int GpuContext::multiprocessor_count() const {
  int count = 0;
  check_cuda(
      cuda_driver().device_get_attribute(&count, cu_device_attribute_multiprocessor_count, device_),
      "cuDeviceGetAttribute(multiprocessor count)");
  return count;
}

std::string GpuContext::device_name() const {
  char name[256] = {};
  check_cuda(cuda_driver().device_get_name(name, sizeof(name), device_), "cuDeviceGetName");
  return name;
}

int GpuContext::clock_rate_khz() const {
  int khz = 0;
  check_cuda(cuda_driver().device_get_attribute(&khz, cu_device_attribute_clock_rate_khz, device_),
             "cuDeviceGetAttribute(clock rate)");
  return khz;
}

int GpuContext::memory_clock_rate_khz() const {
  int khz = 0;
  check_cuda(
      cuda_driver().device_get_attribute(&khz, cu_device_attribute_memory_clock_rate_khz, device_),
      "cuDeviceGetAttribute(memory clock rate)");
  return khz;
}

LoadedModule::LoadedModule(std::span<const char> cubin) {
  if (cubin.empty()) throw Error(ErrorKind::invalid_argument, "cubin is empty: nothing to load");
  check_cuda(cuda_driver().module_load_data(&module_, cubin.data()), "cuModuleLoadData");
}

LoadedModule::~LoadedModule() {
  if (module_ != nullptr) cuda_driver().module_unload(module_);
}

LoadedModule::LoadedModule(LoadedModule&& other) noexcept
    : module_(std::exchange(other.module_, nullptr)) {}

LoadedModule& LoadedModule::operator=(LoadedModule&& other) noexcept {
  if (this != &other) {
    if (module_ != nullptr) cuda_driver().module_unload(module_);
    module_ = std::exchange(other.module_, nullptr);
  }
  return *this;
}

CUfunction LoadedModule::function(const std::string& kernel_name) const {
  CUfunction function = nullptr;
  check_cuda(cuda_driver().module_get_function(&function, module_, kernel_name.c_str()),
             "cuModuleGetFunction('" + kernel_name + "')");
  return function;
}

void prepare_launch(CUfunction function, LaunchShape& shape) {
  raise_function_limits(function, shape);
  shape.function_limits_raised = true;
}

int64_t max_active_clusters(CUfunction function, const LaunchShape& shape) {
  const CudaDriverApi& api = cuda_driver();
  if (api.occupancy_max_active_clusters == nullptr) return -1;
  CuLaunchAttribute attribute = cluster_attribute(shape);
  const CuLaunchConfig config = launch_config(shape, nullptr, &attribute, 1);
  int clusters = 0;
  if (api.occupancy_max_active_clusters(&clusters, function, &config) != 0) return -1;
  return clusters;
}

void copy_to_device_async(CUdeviceptr destination, std::span<const std::byte> source,
                          CUstream stream) {
  if (source.empty()) return;
  check_cuda(cuda_driver().memcpy_htod_async(destination, source.data(), source.size(), stream),
             "cuMemcpyHtoDAsync(" + std::to_string(source.size()) + " bytes)");
}

void launch_kernel(CUfunction function, const LaunchShape& shape, void** arguments,
                   CUstream stream) {
  const CudaDriverApi& api = cuda_driver();
  if (!shape.function_limits_raised) raise_function_limits(function, shape);
  const bool clustered = cluster_ctas(shape) > 1;
  if ((shape.cooperative || clustered) && api.launch_kernel_ex == nullptr)
    throw Error(ErrorKind::not_supported,
                std::string(clustered ? "a cluster" : "a cooperative") +
                    " launch needs cuLaunchKernelEx (CUDA driver 12.0 or newer)");
  if ((shape.programmatic_dependency || shape.cooperative || clustered) &&
      api.launch_kernel_ex != nullptr) {
    CuLaunchAttribute attributes[3]{};
    unsigned count = 0;
    if (clustered) attributes[count++] = cluster_attribute(shape);
    if (shape.programmatic_dependency) {
      attributes[count].id = cu_launch_attribute_programmatic_stream_serialization;
      attributes[count++].value.programmatic_stream_serialization_allowed = 1;
    }
    if (shape.cooperative) {
      attributes[count].id = cu_launch_attribute_cooperative;
      attributes[count++].value.cooperative = 1;
    }
    const CuLaunchConfig config = launch_config(shape, stream, attributes, count);
    check_cuda(api.launch_kernel_ex(&config, function, arguments, nullptr), "cuLaunchKernelEx");
    return;
  }
  check_cuda(api.launch_kernel(function, shape.grid[0], shape.grid[1], shape.grid[2],
                               shape.block[0], shape.block[1], shape.block[2],
                               shape.dynamic_shared_bytes, stream, arguments, nullptr),
             "cuLaunchKernel");
}

DeviceBuffer::DeviceBuffer(int64_t bytes) : bytes_(bytes) {
  if (bytes <= 0) {
    throw Error(ErrorKind::invalid_argument,
                "device buffer bytes " + std::to_string(bytes) + " must be positive");
  }
  check_cuda(cuda_driver().mem_alloc(&address_, static_cast<size_t>(bytes)),
             "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
}

DeviceBuffer::~DeviceBuffer() {
  if (address_ != 0) cuda_driver().mem_free(address_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : address_(std::exchange(other.address_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (address_ != 0) cuda_driver().mem_free(address_);
    address_ = std::exchange(other.address_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::copy_from_host(std::span<const std::byte> source) {
  if (static_cast<int64_t>(source.size()) > bytes_) {
    throw Error(ErrorKind::invalid_argument, "copy of " + std::to_string(source.size()) +
                                                 " bytes into a device buffer of " +
                                                 std::to_string(bytes_));
  }
  check_cuda(cuda_driver().memcpy_htod(address_, source.data(), source.size()), "cuMemcpyHtoD");
}

void DeviceBuffer::copy_to_host(std::span<std::byte> destination) const {
  if (static_cast<int64_t>(destination.size()) > bytes_) {
    throw Error(ErrorKind::invalid_argument, "copy of " + std::to_string(destination.size()) +
                                                 " bytes out of a device buffer of " +
                                                 std::to_string(bytes_));
  }
  check_cuda(cuda_driver().memcpy_dtoh(destination.data(), address_, destination.size()),
             "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  check_cuda(cuda_driver().memset_d8(address_, value, static_cast<size_t>(bytes_)), "cuMemsetD8");
}

void DeviceBuffer::fill_bytes_async(unsigned char value, CUstream stream) {
  check_cuda(cuda_driver().memset_d8_async(address_, value, static_cast<size_t>(bytes_), stream),
             "cuMemsetD8Async");
}

Stream::Stream() {
  check_cuda(cuda_driver().stream_create(&stream_, cu_stream_non_blocking), "cuStreamCreate");
}

Stream::~Stream() {
  if (stream_ != nullptr) cuda_driver().stream_destroy(stream_);
}

void Stream::synchronize() const {
  check_cuda(cuda_driver().stream_synchronize(stream_), "cuStreamSynchronize");
}

Event::Event(bool timing) {
  check_cuda(
      cuda_driver().event_create(&event_, timing ? cu_event_default : cu_event_disable_timing),
      "cuEventCreate");
}

Event::~Event() {
  if (event_ != nullptr) cuda_driver().event_destroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cuda_driver().event_destroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(CUstream stream) {
  check_cuda(cuda_driver().event_record(event_, stream), "cuEventRecord");
}

void Event::wait_on(CUstream stream) const {
  check_cuda(cuda_driver().stream_wait_event(stream, event_, 0), "cuStreamWaitEvent");
}

void Event::synchronize() const {
  check_cuda(cuda_driver().event_synchronize(event_), "cuEventSynchronize");
}

float elapsed_milliseconds(const Event& start, const Event& end) {
  float milliseconds = 0;
  check_cuda(cuda_driver().event_elapsed_time(&milliseconds, start.handle(), end.handle()),
             "cuEventElapsedTime");
  return milliseconds;
}

}  // namespace tilefmha::jit
