// One NVRTC compile: CUDA source -> cubin for one target, with the embedded kernel headers as
// in-memory includes. Stateless and thread-safe (each call owns its NVRTC program).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tilefmha::jit {

struct CompileOptions {
  std::string arch = "sm_90a";              // see target_arch.hpp
  std::string language_standard = "c++20";  // -std=
  bool line_info = false;                   // -lineinfo, for profilers
  bool fast_math = false;            // --use_fast_math (kernels call approximations explicitly)
  bool keep_ptx = false;             // also return the PTX (inspection; never cached)
  std::vector<std::string> defines;  // "NAME" or "NAME=VALUE" -> -D
  std::vector<std::string> extra_arguments;  // passed verbatim, after the others
};

// TILEFMHA_LINEINFO=1 in the environment: the engine compiles its kernels with -lineinfo, so that
// a profiler's per-instruction samples map to kernel source lines (the cache keys differ).
bool line_info_requested();

// TILEFMHA_TIMELINE=1 in the environment: the engine compiles its kernels with TILEFMHA_TIMELINE
// defined, so that the kernels that record a latency timeline (kernels/tile/timeline.h) print it
// from their last CTA (the cache keys differ). A diagnostic: it slows every kernel's end.
bool timeline_requested();

// TILEFMHA_KERNEL_DEFINES in the environment: extra defines for every kernel the engine compiles
// (the kernels' measuring knobs, e.g. TILEFMHA_RESCALE_ALWAYS), so that one build can time a
// kernel both ways in two processes; the cache keys differ. parse_kernel_defines splits the
// value at commas and white space into NAME or NAME=VALUE entries and throws
// Error(invalid_argument) naming an entry that is not one.
std::vector<std::string> parse_kernel_defines(std::string_view text);
std::vector<std::string> kernel_defines_requested();

// The exact NVRTC argument list (also hashed into the cache key). -default-device makes
// unannotated functions device functions, as suits device-only kernel sources.
std::vector<std::string> nvrtc_arguments(const CompileOptions& options);

struct CompiledKernel {
  std::vector<char> cubin;
  std::string log;  // warnings of a successful compile; empty when clean
  std::string ptx;  // only with keep_ptx
};

// Compiles `source` (kernels must be extern "C" so their names survive). `name` names the
// kernel in errors and becomes the program name. Throws Error(compile) with the kernel name,
// the target, the arguments and the full compiler log when NVRTC rejects the source;
// Error(runtime) when NVRTC is missing or fails outside compilation.
CompiledKernel compile_kernel(std::string_view name, std::string_view source,
                              const CompileOptions& options);

}  // namespace tilefmha::jit
