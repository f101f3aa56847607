// The public engine (DESIGN §8): one per GPU. plan(problem) validates once, picks a kernel per
// stage (JIT-compiling on first use, each kernel once per process, cubins cached on disk) and
// sizes the workspace; run(plan, problem, stream) fills parameters and launches, with no
// allocation, no synchronization and no blocking copy, so a run can be captured in a CUDA graph.
// Plans are cached by the problem's shape and traits, never its pointers or index contents.
// Thread-safe: plan and run may be called from any thread.
//
//   tilefmha::Engine engine;                       // device 0, the `full` kernel profile
//   auto plan = engine.plan(problem);              // problem: device views (ProblemBuilder)
//   engine.run(plan, problem, stream);             // any problem with the same shape and traits
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tilefmha/kernel_config.hpp"
#include "tilefmha/merge_states.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha {

namespace runtime {
struct Plan;
}

struct EngineOptions {
  int device = 0;  // CUDA device ordinal
  // The enumeration profile (data/profiles) whose kernels the engine may build on first use.
  std::string profile = "full";
  // Further kernels it may build (e.g. a program's declared kernel set); when `only_listed`,
  // these are the only candidates.
  std::vector<KernelConfig> kernels;
  bool only_listed = false;
  // Restricts the candidates to one pipeline (e.g. sm80_mma to test the portable kernels).
  std::optional<Pipeline> pipeline;
  // Disk cache of compiled kernels: empty = $TILEFMHA_CACHE_DIR or the user's cache directory.
  std::string cache_dir;
  bool disk_cache = true;
};

// A planned problem: the stages, their kernels and the workspace they need. Cheap to copy.
class EnginePlan {
 public:
  // Device bytes a run needs in its workspace (0: none). Runs that pass no workspace use one the
  // plan owns.
  int64_t workspace_bytes() const;
  // Kernel launches per run (an append -> attend plan counts its attention's too).
  int64_t num_stages() const;
  // Split count of a forward problem planned as split-KV + combine (1: one pass).
  int64_t num_splits() const;
  // Whether the split kernel merges the splits itself, each tile's splits one thread block
  // cluster, so the plan has no combine stage (Hopper, up to 16 splits).
  bool splits_merged_in_cluster() const;
  // One line per stage: the kernel and why it was chosen.
  const std::string& explanation() const;
  // The stages' kernels in launch order, in their launch forms (an append -> attend plan: the
  // append kernel, then the attention's).
  std::vector<KernelConfig> kernels() const;

 private:
  friend class Engine;
  std::shared_ptr<const runtime::Plan> plan_;
};

// One candidate kernel's verdict for one stage of a problem (what Engine::explain prints).
struct KernelVerdict {
  KernelConfig kernel;    // in its enumerated form (the plan derives the launch form)
  std::string rejection;  // empty when it fits; else a sentence naming the field at fault
  double score = 0;       // higher is preferred among the fitting kernels
};

class Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates `problem` and plans it (from the cache when its shape was planned before). Throws
  // tilefmha::Error naming the field for invalid problems, and the closest kernels when none
  // fits.
  EnginePlan plan(const Problem& problem);

  // Launches `plan` for `problem` (device views, same shape and traits as the planned problem)
  // on `stream` (a CUstream / cudaStream_t; null: the legacy default stream). `workspace`: a
  // device buffer of at least plan.workspace_bytes() (null: the plan's own, safe across streams
  // but shared by concurrent runs of the plan).
  void run(const EnginePlan& plan, const Problem& problem, void* stream = nullptr,
           void* workspace = nullptr);

  // plan + run.
  EnginePlan run(const Problem& problem, void* stream = nullptr);

  // Merges attention states on the GPU (tilefmha/merge_states.hpp; device views): the split-KV
  // combine kernel on caller-given states, e.g. the per-rank states of context parallelism.
  void merge_states(const MergeStates& states, void* stream = nullptr);

  // Every candidate kernel of every stage with its verdict, best first, as text.
  std::string explain(const Problem& problem) const;
  // The same verdicts, structured: every stage's candidates, best first within each stage.
  // Nothing is compiled (a tool can build the chosen kernels ahead, e.g. in parallel).
  std::vector<KernelVerdict> verdicts(const Problem& problem) const;

  // The GPU's name and SM count.
  std::string device_name() const;
  int sm_count() const;
  // The CUDA device ordinal the engine runs on (EngineOptions::device).
  int device() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tilefmha
