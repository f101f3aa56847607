// The host half of one kernel template, i.e. one (family, pipeline) pair: the five questions the
// rest of the system asks about a kernel. Codegen, enumeration's resource checks, the dispatcher
// and run all go through the table of templates (template_table.hpp), so adding a family or a
// pipeline is one new KernelTemplate and one line in that table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "jit/module.hpp"
#include "runtime/bwd_params.hpp"
#include "runtime/fwd_params.hpp"
#include "templates/rejection.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::templates {

// Device copies of a problem's per-call index arrays (int64; null where the problem has none):
// the caller's device tensors, or the plan workspace's uploads of the problem's host vectors.
using DeviceIndices = runtime::FwdDeviceIndices;

// What a stage's plan fixes beyond the problem: the device's SM count, the split count of a
// split-KV plan (1 otherwise), and whether the split kernel merges the splits of a tile in its
// thread block cluster (writing O and LSE, with no combine stage and no partials).
struct StageContext {
  int64_t sm_count = 0;
  int64_t num_splits = 1;
  bool merge_splits_in_cluster = false;
};

// One launch of a planned stage: the problem's device views, its index arrays, the split-KV
// partials (views into the plan workspace, or the problem's own for family fwd_splitkv), the
// loaded function and the launch shape fixed at plan time.
struct StageLaunch {
  const Problem& problem;
  const DeviceIndices& indices;
  const SplitKv& split;
  jit::CUfunction function = nullptr;
  jit::LaunchShape shape;
  jit::CUstream stream = nullptr;
  // A split kernel launched to merge its splits in the cluster (StageContext): it takes O and LSE
  // from the problem and the split count from `split.num_splits`, and writes no partials.
  bool merges_splits_in_cluster = false;
  // Append-KV as the first stage of an append -> attend plan: where it writes the key counts
  // after the append (plan workspace), which the attention stage reads. Null otherwise.
  int64_t* key_lengths_after = nullptr;
  // The backward stages' D and dQ accumulator (the problem's or the plan workspace's); null for
  // forward stages.
  const runtime::BackwardScratch* backward = nullptr;
};

class KernelTemplate {
 public:
  virtual ~KernelTemplate() = default;
  virtual Family family() const = 0;
  virtual Pipeline pipeline() const = 0;

  // Whether codegen can build `config` (its tile, dtypes and traits), or the first field it
  // cannot. Config-only: no problem involved.
  virtual std::optional<Rejection> supports(const KernelConfig& config) const = 0;
  // Whether `config` (already matched by traits) can run `problem`: limits that only the problem
  // shows (grid sizes, scale sign, GQA group shape). Default: every matched problem.
  virtual std::optional<Rejection> can_implement(const KernelConfig& config,
                                                 const Problem& problem) const;

  // The translation unit of `config` (supports(config) must hold).
  virtual std::string source(const KernelConfig& config) const = 0;
  // Threads per block and dynamic shared memory: the resources enumeration checks against the
  // arch spec and the launch uses.
  virtual int threads(const KernelConfig& config) const = 0;
  virtual int64_t shared_bytes(const KernelConfig& config) const = 0;

  // Grid, block and shared memory of `config` on `problem`.
  virtual jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                                        const StageContext& context) const = 0;
  // The kernel function of `config`'s module that runs `problem`: its symbol, unless the
  // module carries a variant entry for such problems (sm90_ws's page gathers, its split kernels'
  // merge in a cluster). Default: the symbol.
  virtual std::string entry(const KernelConfig& config, const Problem& problem,
                            const StageContext& context) const;
  // Device scratch the stage needs in the plan workspace beyond split partials. Default none.
  virtual int64_t workspace_bytes(const KernelConfig& config, const Problem& problem,
                                  const StageContext& context) const;

  // Fills the kernel's parameters from `launch` and launches it: no allocation, no
  // synchronization, no host-device copy (so a CUDA graph can capture it).
  virtual void launch(const KernelConfig& config, const StageLaunch& launch) const = 0;
};

}  // namespace tilefmha::templates
