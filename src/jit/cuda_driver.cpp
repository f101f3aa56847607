#include "jit/cuda_driver.hpp"

#include "jit/dynamic_library.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

constexpr const char* driver_library = "libcuda.so.1";

template <class Function>
bool bind(const LibraryHandle& library, const char* symbol, Function& slot, std::string& failure) {
  slot = reinterpret_cast<Function>(find_symbol(library, symbol, failure));
  return slot != nullptr;
}

std::string describe(const CudaDriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.get_error_name == nullptr || api.get_error_name(result, &name) != 0) name = nullptr;
  if (api.get_error_string == nullptr || api.get_error_string(result, &text) != 0) text = nullptr;
  std::string description = name != nullptr ? name : "CUDA error " + std::to_string(result);
  if (text != nullptr) description += std::string(" (") + text + ")";
  return description;
}

}  // namespace

CudaDriverLoad load_cuda_driver(const std::string& library_name) {
  CudaDriverLoad load;
  const LibraryHandle library = open_first_library({library_name});
  if (library.handle == nullptr) {
    load.failure = "no CUDA driver found (" + library_name +
                   "): GPU backend unavailable; dlopen said:" + library.failures;
    return load;
  }
  CudaDriverApi& api = load.api;
  std::string& failure = load.failure;
  // Versioned names (_v2) are the ABI that cuda.h's macros select for 64-bit sizes.
  const bool bound =
      bind(library, "cuInit", api.init, failure) &&
      bind(library, "cuDriverGetVersion", api.driver_get_version, failure) &&
      bind(library, "cuGetErrorName", api.get_error_name, failure) &&
      bind(library, "cuGetErrorString", api.get_error_string, failure) &&
      bind(library, "cuDeviceGetCount", api.device_get_count, failure) &&
      bind(library, "cuDeviceGet", api.device_get, failure) &&
      bind(library, "cuDeviceGetName", api.device_get_name, failure) &&
      bind(library, "cuDeviceGetAttribute", api.device_get_attribute, failure) &&
      bind(library, "cuDevicePrimaryCtxRetain", api.primary_ctx_retain, failure) &&
      bind(library, "cuDevicePrimaryCtxRelease_v2", api.primary_ctx_release, failure) &&
      bind(library, "cuCtxSetCurrent", api.ctx_set_current, failure) &&
      bind(library, "cuCtxSynchronize", api.ctx_synchronize, failure) &&
      bind(library, "cuCtxGetCurrent", api.ctx_get_current, failure) &&
      bind(library, "cuModuleLoadData", api.module_load_data, failure) &&
      bind(library, "cuModuleUnload", api.module_unload, failure) &&
      bind(library, "cuModuleGetFunction", api.module_get_function, failure) &&
      bind(library, "cuFuncSetAttribute", api.func_set_attribute, failure) &&
      bind(library, "cuLaunchKernel", api.launch_kernel, failure) &&
      bind(library, "cuMemAlloc_v2", api.mem_alloc, failure) &&
      bind(library, "cuMemFree_v2", api.mem_free, failure) &&
      bind(library, "cuMemcpyHtoD_v2", api.memcpy_htod, failure) &&
      bind(library, "cuMemcpyDtoH_v2", api.memcpy_dtoh, failure) &&
      bind(library, "cuMemcpyHtoDAsync_v2", api.memcpy_htod_async, failure) &&
      bind(library, "cuMemsetD8_v2", api.memset_d8, failure) &&
      bind(library, "cuMemsetD8Async", api.memset_d8_async, failure) &&
      bind(library, "cuStreamCreate", api.stream_create, failure) &&
      bind(library, "cuStreamSynchronize", api.stream_synchronize, failure) &&
      bind(library, "cuStreamDestroy_v2", api.stream_destroy, failure) &&
      bind(library, "cuStreamWaitEvent", api.stream_wait_event, failure) &&
      bind(library, "cuStreamIsCapturing", api.stream_is_capturing, failure) &&
      bind(library, "cuStreamBeginCapture_v2", api.stream_begin_capture, failure) &&
      bind(library, "cuStreamEndCapture", api.stream_end_capture, failure) &&
      bind(library, "cuGraphInstantiateWithFlags", api.graph_instantiate, failure) &&
      bind(library, "cuGraphLaunch", api.graph_launch, failure) &&
      bind(library, "cuGraphExecDestroy", api.graph_exec_destroy, failure) &&
      bind(library, "cuGraphDestroy", api.graph_destroy, failure) &&
      bind(library, "cuEventCreate", api.event_create, failure) &&
      bind(library, "cuEventRecord", api.event_record, failure) &&
      bind(library, "cuEventSynchronize", api.event_synchronize, failure) &&
      // The unversioned ABI (float milliseconds between two events) exists in every driver;
      // CUDA 12.8+ headers map the name to _v2, which newer drivers export as well.
      bind(library, "cuEventElapsedTime", api.event_elapsed_time, failure) &&
      bind(library, "cuEventDestroy_v2", api.event_destroy, failure);
  if (!bound) {
    failure = "CUDA driver " + library.path + " unusable: " + failure;
    return load;
  }
  std::string optional_failure;
  bind(library, "cuTensorMapEncodeTiled", api.tensor_map_encode_tiled, optional_failure);
  bind(library, "cuLaunchKernelEx", api.launch_kernel_ex, optional_failure);
  bind(library, "cuOccupancyMaxActiveClusters", api.occupancy_max_active_clusters,
       optional_failure);
  api.library_path = library.path;
  if (const CUresult result = api.init(0); result != 0) {
    failure = "cuInit failed: " + describe(api, result) + ": GPU backend unavailable";
    return load;
  }
  if (const CUresult result = api.driver_get_version(&api.driver_version); result != 0) {
    failure = "cuDriverGetVersion failed: " + describe(api, result);
  }
  return load;
}

const CudaDriverApi& cuda_driver() {
  static const CudaDriverLoad load = load_cuda_driver(driver_library);
  if (!load.failure.empty()) throw Error(ErrorKind::runtime, load.failure);
  return load.api;
}

std::string gpu_unavailable_reason() {
  try {
    const CudaDriverApi& api = cuda_driver();
    int count = 0;
    check_cuda(api.device_get_count(&count), "cuDeviceGetCount");
    if (count == 0) return "the CUDA driver reports no GPU";
    return {};
  } catch (const Error& error) {
    return error.what();
  }
}

bool context_is_current() {
  try {
    CUcontext context = nullptr;
    return cuda_driver().ctx_get_current(&context) == 0 && context != nullptr;
  } catch (const Error&) {
    return false;
  }
}

void check_cuda(CUresult result, std::string_view call) {
  if (result == 0) return;
  throw Error(ErrorKind::runtime,
              std::string(call) + " failed: " + describe(cuda_driver(), result));
}

}  // namespace tilefmha::jit
