// The NVRTC C API, loaded at run time from libnvrtc.so. The toolkit ships no static NVRTC on
// the build machines, and a hard link would keep binaries from starting where NVRTC is
// missing; loading it lazily confines that failure to JIT calls, with a message that says so.
#pragma once

#include <cstddef>
#include <string>

namespace tilefmha::jit {

// The subset of nvrtc.h used here. nvrtcResult is a C enum, passed as int (same ABI);
// 0 is NVRTC_SUCCESS.
struct NvrtcApi {
  using Program = struct NvrtcProgramOpaque*;
  using Result = int;

  Result (*version)(int* major, int* minor);
  Result (*create_program)(Program* program, const char* source, const char* name, int header_count,
                           const char* const* headers, const char* const* include_names);
  Result (*destroy_program)(Program* program);
  Result (*compile_program)(Program program, int option_count, const char* const* options);
  Result (*get_program_log_size)(Program program, size_t* size);
  Result (*get_program_log)(Program program, char* log);
  Result (*get_cubin_size)(Program program, size_t* size);
  Result (*get_cubin)(Program program, char* cubin);
  Result (*get_ptx_size)(Program program, size_t* size);
  Result (*get_ptx)(Program program, char* ptx);
  const char* (*get_error_string)(Result result);

  std::string library_path;
  int major = 0;
  int minor = 0;
};

// Loaded once per process. Candidates: $TILEFMHA_NVRTC_LIBRARY alone when set, else
// libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so on the loader path, then under $CUDA_HOME,
// $CUDA_PATH, /usr/local/cuda and the build machine's toolkit directory.
// Throws Error(runtime) listing every candidate tried when none loads.
const NvrtcApi& nvrtc_api();

// "13.0": part of every cache key.
std::string nvrtc_version_string();

}  // namespace tilefmha::jit
