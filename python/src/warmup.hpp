// tilefmha.warmup's engine half: JIT-compile a named kernel set into the disk cache ahead of
// first use, with the library code behind `tilefmha build --compile-only` (kernel selection,
// build jobs, the parallel build pipeline), so the first attention call of a shape only loads.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

namespace tilefmha::python {

// Compiles the kernels of sweep config `config` for `arch` ("sm90") under `profile`, restricted
// by `filters` (each must hold), into `cache_dir` ("" = the engine's default directory), on
// `workers` threads (0 = every hardware thread), with the build's progress bar on stderr when
// `progress`; with `launch_forms`, also the launch forms the dispatcher derives from them
// (runtime::with_launch_forms). Needs NVRTC, not a GPU. Releases the GIL meanwhile.
// Returns a dict: enumerated, not_implemented, launch_forms (added), kernels (to build), built,
// cache_hits, failures, errors (a (kernel name, message) pair per failed kernel), seconds,
// nvrtc_target, cache_dir. Bad input (unknown config, profile, arch, a filter error) throws
// Error(invalid_argument) naming it; failing compiles are reported, not thrown, so the caller can
// still see what was built. The families the engine runs on the GPU (those some kernel template
// builds), which warmup compiles by default: the candidates Engine plans from.
std::vector<std::string> gpu_families();

pybind11::dict warmup(const std::string& config, const std::string& arch,
                      const std::string& profile, const std::vector<std::string>& filters,
                      const std::string& cache_dir, int workers, bool progress, bool launch_forms);

}  // namespace tilefmha::python
