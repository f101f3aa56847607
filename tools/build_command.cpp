// `tilefmha build`: enumerate -> codegen -> parallel JIT (cached) -> load into a Registry.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <unordered_map>

#include "commands.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/module.hpp"
#include "jit/target_arch.hpp"
#include "runtime/device_info.hpp"
#include "runtime/kernel_selection.hpp"
#include "runtime/precompile.hpp"
#include "runtime/registry.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

struct BuildCommandOptions {
  runtime::KernelSelection selection;
  std::string arch_name = "sm90";
  bool compile_only = false;
  int workers = 0;
  std::string cache_dir;
  bool supported_only = false;
  bool no_progress = false;
  std::vector<std::string> nvrtc_options;  // appended to the NVRTC arguments (and cache key)
};

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

void print_count(std::ostream& out, const char* label, int64_t value) {
  char line[96];
  std::snprintf(line, sizeof line, "  %-22s %lld\n", label, static_cast<long long>(value));
  out << line;
}

void print_value(std::ostream& out, const char* label, const std::string& value) {
  char line[96];
  std::snprintf(line, sizeof line, "  %-22s ", label);
  out << line << value << '\n';
}

// A GPU that can run kernels of `arch`, or an error saying why not, before any compiling.
std::unique_ptr<jit::GpuContext> open_gpu_for(Arch arch) {
  if (const std::string why = jit::gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorKind::runtime, "build: loading kernels needs a GPU (" + why +
                                        "); pass --compile-only to compile without one");
  auto context = std::make_unique<jit::GpuContext>();
  const int capability = context->compute_capability();
  const Arch device = runtime::arch_for_compute_capability(capability);
  // A cubin runs only on its own major architecture, at its minor version or newer.
  if (arch > device || (arch == Arch::sm90) != (device == Arch::sm90))
    throw Error(ErrorKind::invalid_argument,
                "--arch " + std::string(to_string(arch)) + " kernels cannot load on " +
                    context->device_name() + " (compute capability " +
                    std::to_string(capability / 10) + "." + std::to_string(capability % 10) +
                    "); use --arch " + std::string(to_string(device)) + " or --compile-only");
  return context;
}

struct Means {
  double sum = 0;
  int64_t count = 0;
  void add(double value) {
    sum += value;
    ++count;
  }
  std::string text(const char* pattern, double scale, const char* none) const {
    return count == 0 ? none : format(pattern, scale * sum / static_cast<double>(count));
  }
};

void run_build(const BuildCommandOptions& options, std::ostream& out) {
  if (options.workers < 0)
    throw Error(ErrorKind::invalid_argument,
                "--workers " + std::to_string(options.workers) + " is negative; 0 = every core");
  runtime::KernelSelection selection = options.selection;
  selection.arch = parse_enum<Arch>(options.arch_name);
  const runtime::SelectedKernels kernels = runtime::select_kernels(selection);
  const jit::KernelCache cache(options.cache_dir.empty()
                                   ? jit::KernelCache::default_directory()
                                   : std::filesystem::path(options.cache_dir));
  std::unique_ptr<jit::GpuContext> gpu;
  if (!options.compile_only) gpu = open_gpu_for(selection.arch);

  jit::BuildOptions build;
  build.compile.arch = jit::nvrtc_target(selection.arch);
  build.compile.extra_arguments = options.nvrtc_options;
  build.workers = options.workers;
  build.show_progress = !options.no_progress;

  out << "build: " << kernels.description << ", NVRTC target " << build.compile.arch << '\n';
  print_count(out, "enumerated", kernels.enumerated);
  if (!options.supported_only) {
    for (const runtime::NotImplemented& missing : kernels.not_implemented)
      out << "  not implemented: " << missing.config.name() << ": " << missing.reason << '\n';
    print_count(out, "not implemented", static_cast<int64_t>(kernels.not_implemented.size()));
  }
  print_count(out, "to build", static_cast<int64_t>(kernels.supported.size()));
  print_value(out, "cache directory", cache.directory().string());
  out.flush();

  // Named and generated as the dispatcher compiles them, so both share cache entries.
  const std::vector<jit::BuildJob> jobs = runtime::build_jobs(kernels.supported);
  std::unordered_map<std::string, const KernelConfig*> by_symbol;
  for (const KernelConfig& config : kernels.supported) by_symbol.emplace(config.symbol(), &config);
  runtime::Registry registry;
  jit::LoadStage load;
  if (gpu) {
    load = [&](jit::BuildResult& result) {
      const KernelConfig& config = *by_symbol.at(result.name);
      registry.add(config, result.cubin);
      registry.function(config);  // loads the module now, so a bad cubin fails here
    };
  }
  const jit::BuildReport report = jit::build_kernels(jobs, build, &cache, load);

  Means compile, cache_read, module_load;
  for (const jit::BuildResult& result : report.results) {
    if (!result.ok) {
      const KernelConfig& config = *by_symbol.at(result.name);
      std::cerr << "kernel " << config.name() << " (symbol " << result.name << ") failed:\n"
                << result.error << "\n\n";
      continue;
    }
    (result.cache == jit::CacheOutcome::hit ? cache_read : compile).add(result.compile_seconds);
    if (gpu) module_load.add(result.load_seconds);
  }
  const jit::BuildCounts& counts = report.summary.counts;
  out << "result:\n";
  print_count(out, "kernels built", counts.built);
  print_count(out, "cache hits", counts.cache_hits);
  print_count(out, "failures", counts.failures);
  print_value(
      out, "loaded",
      gpu ? std::to_string(module_load.count) + " into the registry on " + gpu->device_name()
          : std::string("skipped (--compile-only)"));
  print_value(out, "wall seconds", format("%.2f", report.summary.seconds));
  print_value(out, "kernels/second", format("%.2f", report.summary.kernels_per_second));
  print_value(out, "JIT s/kernel (mean)", compile.text("%.2f", 1, "n/a (nothing compiled)"));
  print_value(out, "cache hit ms/kernel", cache_read.text("%.2f", 1e3, "n/a (no hits)"));
  if (gpu) print_value(out, "load ms/kernel", module_load.text("%.2f", 1e3, "n/a"));
  out.flush();
  if (counts.failures > 0)
    throw Error(ErrorKind::compile, std::to_string(counts.failures) + " of " +
                                        std::to_string(counts.total) +
                                        " kernels failed to build (logs above)");
}

}  // namespace

void add_build_command(CLI::App& app) {
  auto options = std::make_shared<BuildCommandOptions>();
  CLI::App* build = app.add_subcommand(
      "build", "Enumerate, generate and JIT-compile kernels (cached), then load them on the GPU");
  build
      ->add_option("config", options->selection.config,
                   "sweep config: a name under <data>/configs (fwd, bwd, ...) or a JSON path")
      ->required();
  build->add_option("--arch", options->arch_name, "target architecture: sm80, sm86, sm89, sm90")
      ->capture_default_str();
  build->add_option("--profile", options->selection.profile, "named profile (see tilefmha list)")
      ->capture_default_str();
  build
      ->add_option("--filter", options->selection.filters,
                   "filter expression over c.<field>; repeatable, all must hold")
      ->allow_extra_args(false);
  build
      ->add_option("--filter-file", options->selection.filter_files,
                   "file of filter expressions, one per line; repeatable")
      ->allow_extra_args(false);
  build->add_flag("--compile-only", options->compile_only,
                  "compile (and cache) without loading: needs no GPU");
  build->add_option("--workers", options->workers, "compile threads; 0 = every hardware thread")
      ->capture_default_str();
  build->add_option("--cache-dir", options->cache_dir,
                    "cubin cache directory (default $TILEFMHA_CACHE_DIR or the user cache dir)");
  build->add_flag("--supported-only", options->supported_only,
                  "do not list kernels that codegen does not implement yet");
  build->add_flag("--no-progress", options->no_progress, "no progress bar on stderr");
  build
      ->add_option("--nvrtc-option", options->nvrtc_options,
                   "extra NVRTC argument, e.g. -maxrregcount=128; repeatable (cached apart)")
      ->allow_extra_args(false);
  build->callback([options] { run_build(*options, std::cout); });
}

}  // namespace tilefmha::cli
