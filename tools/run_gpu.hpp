// `tilefmha run --backend gpu`: the stages through tilefmha::Engine on the GPU, and `--validate`
// against the CPU reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device_mirror.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::cli {

struct GpuRun {
  double seconds = 0;  // one warm run (after the first, which may JIT and load)
  std::string device_name;
  std::string explanation;  // the plan's choice per stage (EnginePlan::explanation)
  // Inputs a stage writes in place (fwd_appendkv: the K/V caches, and Q when it rotates), as the
  // GPU left them; the host problems keep their inputs for the reference.
  struct WrittenInput {
    std::string name;
    runtime::DeviceMirror::HostBytes written;
  };
  std::vector<WrittenInput> written_inputs;
};

// Runs the stages on the GPU through one Engine (the `full` profile, the disk cache); the results
// land in the host problems' output views. A fwd stage's split.num_splits is the engine's split
// request (0: automatic, 1: one pass, n: n splits); a bwd_dq_dk_dv stage runs the whole backward.
// Throws Error(invalid_argument) when no GPU is usable and Error(not_supported) for families the
// GPU backend does not run yet.
// `pipeline`, when set, restricts the engine's candidates to that pipeline
// (EngineOptions::pipeline).
GpuRun run_on_gpu(const std::vector<Problem>& stages, std::optional<Pipeline> pipeline);

// Copies the inputs the GPU wrote in place (gpu.written_inputs) into the host problems' views,
// so that saved outputs (k_appended.npy...) are the GPU's. After any validation, which needs the
// host inputs as they were.
void keep_written_inputs(const std::vector<Problem>& stages, const GpuRun& gpu);

struct Validation {
  bool passed = true;
  std::string report;        // one line per compared output: max abs / rel error vs the tolerance
  double max_abs_error = 0;  // over every compared output (NaN elements count as mismatches)
  int64_t mismatches = 0;    // elements outside their output's tolerance
  int64_t compared = 0;
};

// Recomputes the stages on the CPU reference into separate buffers and compares every element
// of O (and LSE) with what the GPU wrote into the host views, and the inputs the GPU wrote in
// place (gpu.written_inputs) with the reference's (the reference writes those into the host
// problems' views); a backward stage compares dQ, dK and dV (runtime::gradient_tolerance).
Validation validate_against_reference(const std::vector<Problem>& stages, const GpuRun& gpu);
// The same for stages that write no input in place.
inline Validation validate_against_reference(const std::vector<Problem>& stages) {
  return validate_against_reference(stages, GpuRun{});
}

}  // namespace tilefmha::cli
