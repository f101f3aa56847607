// `tilefmha run --backend gpu`: the stages through tilefmha::Engine on the GPU, and `--validate`
// against the CPU reference.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tilefmha/problem.hpp"

namespace tilefmha::cli {

struct GpuRun {
  double seconds = 0;  // one warm run (after the first, which may JIT and load)
  std::string device_name;
  std::string explanation;  // the plan's choice per stage (EnginePlan::explanation)
};

// Runs the stages on the GPU through one Engine (the `full` profile, the disk cache); the results
// land in the host problems' output views. A fwd stage's split.num_splits is the engine's split
// request (0: automatic, 1: one pass, n: n splits); a bwd_dq_dk_dv stage runs the whole backward.
// Throws Error(invalid_argument) when no GPU is usable and Error(not_supported) for families the
// GPU backend does not run yet.
// `pipeline`, when set, restricts the engine's candidates to that pipeline
// (EngineOptions::pipeline).
GpuRun run_on_gpu(const std::vector<Problem>& stages, std::optional<Pipeline> pipeline);

struct Validation {
  bool passed = true;
  std::string report;  // one line per compared output: max abs / rel error vs the tolerance
};

// Recomputes the stages on the CPU reference into separate buffers and compares every element
// of O (and LSE) with what the GPU wrote into the host views; a backward stage compares dQ, dK
// and dV (runtime::gradient_tolerance).
Validation validate_against_reference(const std::vector<Problem>& stages);

}  // namespace tilefmha::cli
