// A plan: the kernels of one problem signature, in launch order, with their launch shapes.
// Built once by Dispatcher::plan and reused by every run of the same signature.
#pragma once

#include <string>
#include <vector>

#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

struct PlannedStage {
  KernelConfig kernel;
  jit::LaunchShape shape;
};

struct Plan {
  std::string signature;
  std::vector<PlannedStage> stages;
  // Why each stage's kernel was chosen (shown by `--explain`).
  std::string explanation;
};

// Everything about a problem that a plan depends on: shapes and traits, never data pointers or
// per-call index contents (group-mode plans key on batch and the longest sequences).
std::string problem_signature(const Problem& problem);

}  // namespace tilefmha::runtime
