#include "warmup.hpp"

#include <pybind11/stl.h>

#include <filesystem>
#include <optional>
#include <utility>

#include "jit/build_pipeline.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/target_arch.hpp"
#include "runtime/kernel_selection.hpp"
#include "runtime/precompile.hpp"
#include "templates/template_table.hpp"

namespace tilefmha::python {
namespace py = pybind11;

std::vector<std::string> gpu_families() {
  std::vector<std::string> names;
  for (const Family family : templates::template_families()) names.emplace_back(to_string(family));
  return names;
}

py::dict warmup(const std::string& config, const std::string& arch, const std::string& profile,
                const std::vector<std::string>& filters, const std::string& cache_dir, int workers,
                bool progress, bool launch_forms) {
  runtime::KernelSelection selection;
  selection.config = config;
  selection.arch = parse_enum<Arch>(arch);
  selection.profile = profile;
  selection.filters = filters;

  std::optional<runtime::SelectedKernels> kernels;
  std::optional<jit::KernelCache> cache;
  jit::BuildOptions build;
  build.compile.arch = jit::nvrtc_target(selection.arch);
  build.workers = workers;
  build.show_progress = progress;
  std::vector<KernelConfig> configs;
  jit::BuildReport report;
  {
    // Enumeration, code generation and NVRTC take seconds to minutes; other Python threads
    // (and the progress bar's caller) keep running.
    py::gil_scoped_release release;
    kernels = runtime::select_kernels(selection);
    cache.emplace(cache_dir.empty() ? jit::KernelCache::default_directory()
                                    : std::filesystem::path(cache_dir));
    configs = launch_forms ? runtime::with_launch_forms(kernels->supported) : kernels->supported;
    const std::vector<jit::BuildJob> jobs = runtime::build_jobs(configs);
    report = jit::build_kernels(jobs, build, &*cache);
  }

  py::list errors;
  for (const jit::BuildResult& result : report.results)
    if (!result.ok) errors.append(py::make_tuple(result.name, result.error));
  const jit::BuildCounts& counts = report.summary.counts;
  py::dict out;
  out["enumerated"] = kernels->enumerated;
  out["not_implemented"] = kernels->not_implemented.size();
  out["launch_forms"] = configs.size() - kernels->supported.size();
  out["kernels"] = counts.total;
  out["built"] = counts.built;
  out["cache_hits"] = counts.cache_hits;
  out["failures"] = counts.failures;
  out["errors"] = std::move(errors);
  out["seconds"] = report.summary.seconds;
  out["nvrtc_target"] = build.compile.arch;
  out["cache_dir"] = cache->directory().string();
  return out;
}

}  // namespace tilefmha::python
