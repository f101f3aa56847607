// The CUDA driver API, loaded at run time from libcuda.so.1. Machines without a GPU have no
// libcuda, and a binary linked with -lcuda would not even start there; loading it lazily keeps
// the CPU backend and compile-only builds working, and GPU calls fail with a clear error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tilefmha::jit {

// Driver types, ABI-identical to cuda.h.
using CUresult = int;  // 0 is CUDA_SUCCESS
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;

// cuDeviceGetAttribute / cuFuncSetAttribute codes used here (values from cuda.h).
constexpr int cu_device_attribute_compute_capability_major = 75;
constexpr int cu_device_attribute_compute_capability_minor = 76;
constexpr int cu_device_attribute_multiprocessor_count = 16;
constexpr int cu_func_attribute_max_dynamic_shared_size_bytes = 8;
constexpr int cu_func_attribute_non_portable_cluster_size_allowed = 14;
constexpr int cu_device_attribute_clock_rate_khz = 13;         // peak SM clock
constexpr int cu_device_attribute_memory_clock_rate_khz = 36;  // peak memory clock
constexpr unsigned cu_stream_non_blocking = 1;   // no implicit sync with the legacy stream
constexpr unsigned cu_event_default = 0;         // timing enabled
constexpr unsigned cu_event_disable_timing = 2;  // ordering only: cheaper to record

// The 128-byte CUtensorMap (64-byte aligned), filled by cuTensorMapEncodeTiled.
struct alignas(64) CuTensorMap {
  unsigned long long opaque[16];
};

// cuLaunchKernelEx's configuration (CUlaunchConfig, CUlaunchAttribute: a 4-byte id padded to 8,
// then a 64-byte value union whose members hold pointers).
constexpr int cu_launch_attribute_cooperative = 2;
constexpr int cu_launch_attribute_cluster_dimension = 4;
constexpr int cu_launch_attribute_programmatic_stream_serialization = 6;
struct CuLaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
    int cooperative;
    struct {
      unsigned x, y, z;
    } cluster_dimension;
    void* align;
  } value;
};
struct CuLaunchConfig {
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x, block_y, block_z;
  unsigned shared_bytes;
  CUstream stream;
  CuLaunchAttribute* attributes;
  unsigned attribute_count;
};
static_assert(sizeof(CuLaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes in cuda.h");

struct CudaDriverApi {
  CUresult (*init)(unsigned int flags);
  CUresult (*driver_get_version)(int* version);
  CUresult (*get_error_name)(CUresult error, const char** name);
  CUresult (*get_error_string)(CUresult error, const char** text);
  CUresult (*device_get_count)(int* count);
  CUresult (*device_get)(CUdevice* device, int ordinal);
  CUresult (*device_get_name)(char* name, int length, CUdevice device);
  CUresult (*device_get_attribute)(int* value, int attribute, CUdevice device);
  CUresult (*primary_ctx_retain)(CUcontext* context, CUdevice device);
  CUresult (*primary_ctx_release)(CUdevice device);
  CUresult (*ctx_set_current)(CUcontext context);
  CUresult (*ctx_synchronize)();
  CUresult (*ctx_get_current)(CUcontext* context);
  CUresult (*module_load_data)(CUmodule* module, const void* image);
  CUresult (*module_unload)(CUmodule module);
  CUresult (*module_get_function)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*func_set_attribute)(CUfunction function, int attribute, int value);
  CUresult (*launch_kernel)(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                            unsigned block_x, unsigned block_y, unsigned block_z,
                            unsigned shared_bytes, CUstream stream, void** parameters,
                            void** extra);
  // Null on drivers older than CUDA 11.8: launches then go through launch_kernel.
  CUresult (*launch_kernel_ex)(const CuLaunchConfig* config, CUfunction function, void** parameters,
                               void** extra);
  // Null on drivers older than CUDA 11.8.
  CUresult (*occupancy_max_active_clusters)(int* clusters, CUfunction function,
                                            const CuLaunchConfig* config);
  CUresult (*mem_alloc)(CUdeviceptr* pointer, size_t bytes);
  CUresult (*mem_free)(CUdeviceptr pointer);
  CUresult (*memcpy_htod)(CUdeviceptr destination, const void* source, size_t bytes);
  CUresult (*memcpy_dtoh)(void* destination, CUdeviceptr source, size_t bytes);
  CUresult (*memcpy_htod_async)(CUdeviceptr destination, const void* source, size_t bytes,
                                CUstream stream);
  CUresult (*memset_d8)(CUdeviceptr destination, unsigned char value, size_t bytes);
  CUresult (*memset_d8_async)(CUdeviceptr destination, unsigned char value, size_t bytes,
                              CUstream stream);
  CUresult (*stream_create)(CUstream* stream, unsigned flags);
  CUresult (*stream_synchronize)(CUstream stream);
  CUresult (*stream_destroy)(CUstream stream);
  CUresult (*stream_wait_event)(CUstream stream, CUevent event, unsigned flags);
  // status: 0 none, 1 active, 2 invalidated (CUstreamCaptureStatus).
  CUresult (*stream_is_capturing)(CUstream stream, int* status);
  // CUDA graphs: capture a stream's work, instantiate, replay (mode 2 = relaxed capture).
  CUresult (*stream_begin_capture)(CUstream stream, int mode);
  CUresult (*stream_end_capture)(CUstream stream, CUgraph* graph);
  CUresult (*graph_instantiate)(CUgraphExec* exec, CUgraph graph, unsigned long long flags);
  CUresult (*graph_launch)(CUgraphExec exec, CUstream stream);
  CUresult (*graph_exec_destroy)(CUgraphExec exec);
  CUresult (*graph_destroy)(CUgraph graph);
  CUresult (*event_create)(CUevent* event, unsigned flags);
  CUresult (*event_record)(CUevent event, CUstream stream);
  CUresult (*event_synchronize)(CUevent event);
  CUresult (*event_elapsed_time)(float* milliseconds, CUevent start, CUevent end);
  CUresult (*event_destroy)(CUevent event);
  // Null on drivers older than CUDA 12 (no TMA).
  CUresult (*tensor_map_encode_tiled)(CuTensorMap* map, int data_type, unsigned rank,
                                      void* global_address, const uint64_t* global_dims,
                                      const uint64_t* global_strides, const uint32_t* box_dims,
                                      const uint32_t* element_strides, int interleave, int swizzle,
                                      int l2_promotion, int oob_fill);

  std::string library_path;
  int driver_version = 0;  // e.g. 13000
};

// Loads `library`, binds the API and runs cuInit(0). Never throws: on failure the returned
// text says why and `api` is unusable. Exposed for tests; use cuda_driver().
struct CudaDriverLoad {
  CudaDriverApi api{};
  std::string failure;  // empty on success
};
CudaDriverLoad load_cuda_driver(const std::string& library);

// The process-wide driver, loaded once (thread-safe). Throws Error(runtime) "no CUDA driver
// found (libcuda.so.1): GPU backend unavailable (...)" when libcuda is absent, or naming the
// failing call when cuInit fails.
const CudaDriverApi& cuda_driver();

// Empty when a driver and at least one GPU are usable, else the reason (for skipping GPU work).
std::string gpu_unavailable_reason();

// Whether this thread has a current CUDA context (false where no driver loads): planning loads
// kernels only then, so plans can also be made on machines without a GPU.
bool context_is_current();

// Throws Error(runtime) "<call> failed: CUDA_ERROR_X (description)" unless result is success.
void check_cuda(CUresult result, std::string_view call);

}  // namespace tilefmha::jit
