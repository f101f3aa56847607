#include "run_execute.hpp"

#include <chrono>

#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::cli {
namespace {

Problem with_family(const Problem& problem, Family family) {
  Problem stage = problem;
  stage.family = family;
  return stage;
}

}  // namespace

std::vector<Problem> stage_problems(const RunSpec& spec) {
  const Problem& p = spec.problem;
  switch (spec.stages) {
    case RunStages::forward: return {p};
    case RunStages::splitkv:
      return {with_family(p, Family::fwd_splitkv), with_family(p, Family::fwd_splitkv_combine)};
    case RunStages::backward:
      return {with_family(p, Family::fwd), with_family(p, Family::bwd_dq_dk_dv)};
    // The run's O makes it one append -> attend problem (attention_after_append), planned as
    // one plan on the GPU and run as append then forward by the reference.
    case RunStages::append: return {p};
  }
  return {p};
}

void validate_stages(const std::vector<Problem>& stages) {
  for (const Problem& stage : stages) validate(stage);
}

double run_on_cpu(const std::vector<Problem>& stages) {
  const auto start = std::chrono::steady_clock::now();
  for (const Problem& stage : stages) {
    if (stage.is_backward()) {
      reference::backward(stage);
    } else {
      reference::run(stage);
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tilefmha::cli
