// The stages of one `tilefmha run` on the CPU reference.
#pragma once

#include <vector>

#include "run_spec.hpp"

namespace tilefmha::cli {

// The problem of each stage in order: one for a forward, fwd_splitkv then
// fwd_splitkv_combine for split-KV, a forward then the three backward stages (one problem,
// reference::backward runs them) for backward, the append then a forward over the updated
// caches for append-KV.
std::vector<Problem> stage_problems(const RunSpec& spec);

// Validates every stage (Error invalid_problem, exit 2) before anything is computed.
void validate_stages(const std::vector<Problem>& stages);

// Runs the stages on the reference; returns the wall time in seconds.
double run_on_cpu(const std::vector<Problem>& stages);

}  // namespace tilefmha::cli
