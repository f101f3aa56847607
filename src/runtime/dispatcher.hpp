// The dispatcher (DESIGN §8): plan(Problem) picks a kernel per stage by exact traits, padding
// needs and a heuristic over lengths, heads and SM count, JIT-compiling on first use, and
// caches the Plan by problem signature; run(Plan, problem, stream) only fills parameters and
// launches.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit/compiler.hpp"
#include "jit/kernel_cache.hpp"
#include "runtime/device_info.hpp"
#include "runtime/plan.hpp"
#include "runtime/registry.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

struct DispatcherOptions {
  // Kernels the dispatcher may build on first use, besides those already in the registry
  // (typically an enumerated profile for the device's arch).
  std::vector<KernelConfig> candidates;
  jit::CompileOptions compile;
  // Cubin cache for JIT on first use; null compiles without caching.
  std::shared_ptr<const jit::KernelCache> cache;
};

// A candidate's verdict for one stage, for --explain and for "no kernel fits" errors.
struct CandidateVerdict {
  KernelConfig kernel;
  std::string rejection;  // empty when it fits
  double score = 0;       // higher is preferred among fitting kernels
};

class Dispatcher {
 public:
  Dispatcher(Registry& registry, DeviceInfo device, DispatcherOptions options);

  // Validates the problem and returns its plan, from the cache when the signature was planned
  // before. Throws Error(no_kernel) naming the closest candidates when a stage has no kernel.
  std::shared_ptr<const Plan> plan(const Problem& problem);

  // Every candidate of every stage with its verdict, best first (no compilation).
  std::vector<CandidateVerdict> explain(const Problem& problem) const;

  // Launches the plan's stages on `stream`; the problem's tensors must be device views.
  void run(const Plan& plan, const Problem& problem, jit::CUstream stream = nullptr);

  const DeviceInfo& device() const { return device_; }

 private:
  std::vector<CandidateVerdict> verdicts(const Problem& problem, Family stage) const;
  void ensure_built(const KernelConfig& kernel);

  Registry& registry_;
  DeviceInfo device_;
  DispatcherOptions options_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Plan>> plans_;
};

}  // namespace tilefmha::runtime
