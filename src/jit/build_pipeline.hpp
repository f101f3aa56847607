// A kernel build as a pipeline: worker threads compile (or fetch from the cache) while the
// calling thread runs the load stage on each finished cubin, in completion order, so loading
// overlaps compiling. Compile-only builds (no load stage) need no GPU or driver.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "jit/build_progress.hpp"
#include "jit/cached_compiler.hpp"

namespace tilefmha::jit {

struct BuildJob {
  std::string name;
  std::string source;
};

struct BuildOptions {
  CompileOptions compile;
  int workers = 0;            // compile threads; 0 = every hardware thread
  bool show_progress = true;  // on stderr
};

struct BuildResult {
  std::string name;
  bool ok = false;
  CacheOutcome cache = CacheOutcome::uncached;
  double compile_seconds = 0;  // compile or cache read
  double load_seconds = 0;     // load stage; 0 without one
  std::string error;           // full message (compiler log included) when !ok
  std::string note;            // corruption detail, compiler warnings
  std::vector<char> cubin;
};

struct BuildSummary {
  BuildCounts counts;
  double seconds = 0;
  double kernels_per_second = 0;  // successful kernels per wall second
};

struct BuildReport {
  std::vector<BuildResult> results;  // in job order
  BuildSummary summary;
  // Every failure with its kernel name and full error, one block each; empty when none failed.
  std::string failure_report() const;
};

// Runs on the calling thread for each successfully compiled job; a throw marks that job failed.
using LoadStage = std::function<void(BuildResult&)>;

// Never throws for a failing job (its result carries the error). `cache` may be null.
BuildReport build_kernels(std::span<const BuildJob> jobs, const BuildOptions& options,
                          const KernelCache* cache, const LoadStage& load = {});

}  // namespace tilefmha::jit
