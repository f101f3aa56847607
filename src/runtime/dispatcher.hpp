// The dispatcher (DESIGN §8): plan(Problem) validates once, picks a kernel per stage by exact
// traits, padding needs and the heuristics module (runtime/heuristics.hpp), decides split-KV,
// JIT-compiles on first use (each kernel once per process), sizes the workspace and caches the
// Plan by its typed PlanKey; run(Plan, problem, stream) only fills parameters and launches.
#pragma once

#include <memory>
#include <optional>
#include <shared_mutex>
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
  std::string rejection;        // empty when it fits; else a sentence naming the field
  std::string rejection_field;  // the field at fault (empty when it fits)
  double score = 0;             // higher is preferred among fitting kernels
};

class Dispatcher {
 public:
  Dispatcher(Registry& registry, DeviceInfo device, DispatcherOptions options);

  // Validates the problem and returns its plan, from the cache when its PlanKey was planned
  // before. Needs the CUDA context current when kernels must be loaded. Throws
  // Error(no_kernel) naming the closest candidates when a stage has no kernel.
  std::shared_ptr<const Plan> plan(const Problem& problem);

  // Every candidate of every stage the problem's plan would run, with its verdict, best first
  // (no compilation).
  std::vector<CandidateVerdict> explain(const Problem& problem) const;

  // Launches the plan's stages on `stream`. The problem must have the plan's PlanKey and device
  // views; it is not validated again. Nothing is allocated and nothing waits on the host: host
  // index vectors are queued as asynchronous copies into the workspace. `workspace` is a device
  // address of at least plan.workspace.bytes (0: the plan's own, ordered across streams).
  void run(const Plan& plan, const Problem& problem, jit::CUstream stream = nullptr,
           jit::CUdeviceptr workspace = 0) const;

  const DeviceInfo& device() const { return device_; }

 private:
  std::vector<CandidateVerdict> verdicts(const Problem& problem, Family stage) const;
  const CandidateVerdict& best_or_throw(const std::vector<CandidateVerdict>& verdicts,
                                        const Problem& problem, Family stage) const;
  PlannedStage prepare_stage(const KernelConfig& kernel, const Problem& problem, int64_t num_splits,
                             bool merge_splits_in_cluster = false);
  // The split stage whose clusters merge the splits, where the heuristics allow it and every
  // cluster fits on the device at once (runtime::merges_splits_in_cluster,
  // clusters_run_in_one_wave); else none, and the plan keeps the combine.
  std::optional<PlannedStage> cluster_merged_stage(const KernelConfig& split_kernel,
                                                   const Problem& problem, int64_t num_splits);
  // `own_workspace`: allocate the plan's workspace (a nested attention plan uses its parent's).
  std::shared_ptr<Plan> build_plan(const Problem& problem, bool own_workspace = true);

  Registry& registry_;
  DeviceInfo device_;
  DispatcherOptions options_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<PlanKey, std::shared_ptr<const Plan>, PlanKeyHash> plans_;
};

}  // namespace tilefmha::runtime
