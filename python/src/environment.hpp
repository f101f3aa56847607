// What `python -m tilefmha` reports about the machine: the GPUs the CUDA driver sees, the driver
// and NVRTC, and the kernel cache directory. Each piece is a separate call so that the report
// can say which one is missing (no driver, no GPU, no NVRTC) and still print the others.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace tilefmha::python {

// One dict per GPU: ordinal, name, compute_capability (e.g. 90), sm_count, arch (the kernel
// arch the engine builds for it, e.g. "sm90", or None below sm80) and nvrtc_target ("sm_90a",
// or None). Throws Error(runtime) when no driver loads; an empty list when it sees no GPU.
pybind11::list gpu_devices();

// {"version": 13000, "library": "libcuda.so.1"}; throws Error(runtime) when no driver loads.
pybind11::dict driver_info();

// {"version": "13.0", "library": "/usr/local/cuda/lib64/libnvrtc.so.13"}; throws
// Error(runtime) listing the candidates tried when NVRTC does not load.
pybind11::dict nvrtc_info();

// The directory the engine caches cubins in when given none: $TILEFMHA_CACHE_DIR, else
// $XDG_CACHE_HOME/tilefmha, else $HOME/.cache/tilefmha. Throws Error(io) when none is set.
std::string default_cache_directory();

}  // namespace tilefmha::python
