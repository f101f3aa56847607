// A failing stage of a run names its kernel and the problem (issue 15: "errors from a GPU run
// say which kernel and which problem"), keeping the engine's error kind. CPU only: the stages
// fail before any driver call, in parameter building or in fetching an unbuilt function.
#include <gtest/gtest.h>

#include <string>

#include "runtime/plan.hpp"
#include "runtime/registry.hpp"
#include "runtime/stage_runner.hpp"
#include "support/forward_problems.hpp"
#include "support/kernel_configs.hpp"
#include "templates/template_table.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using testing::Dims;
using testing::TensorPool;

// A one-stage plan of `kernel`; `function` stands in for a loaded kernel (never called here).
runtime::Plan one_stage_plan(const KernelConfig& kernel, jit::CUfunction function) {
  runtime::Plan plan;
  plan.stages.push_back(
      {kernel, &templates::kernel_template(kernel), kernel.symbol(), function, {}});
  return plan;
}

// The message of the Error that run_stages throws, its kind checked against `kind`.
std::string run_error(const runtime::Plan& plan, const Problem& problem, ErrorKind kind) {
  const runtime::Registry registry;
  try {
    runtime::run_stages(plan, problem, registry, nullptr, 0);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), kind) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "run_stages did not throw";
  return {};
}

TEST(StageRunnerError, ParameterFailureNamesKernelAndProblem) {
  TensorPool pool(3);
  // Host views: filling the GPU kernel's parameters refuses q before anything is launched.
  const Problem problem =
      testing::batch_problem(pool, Family::fwd, DType::bf16, Dims{1, 4, 2, 16, 24, 64, 64})
          .causal()
          .build();
  const KernelConfig kernel = testing::sm80_fwd_config(DType::bf16, 64, 64, 64, 64, 4, 2);
  const auto fake_function = reinterpret_cast<jit::CUfunction>(uintptr_t{1});
  const std::string message =
      run_error(one_stage_plan(kernel, fake_function), problem, ErrorKind::invalid_problem);
  EXPECT_EQ(
      message.rfind("kernel " + kernel.name() + " on problem " + problem.describe() + ": ", 0), 0u)
      << message;
  EXPECT_NE(message.find("q is in host memory"), std::string::npos) << message;
  // The description carries the problem's shape and mask, not just its family.
  EXPECT_NE(message.find("sq=16 sk=24"), std::string::npos) << message;
  EXPECT_NE(message.find("mask=causal"), std::string::npos) << message;
}

TEST(StageRunnerError, UnbuiltFunctionNamesKernelAndProblem) {
  TensorPool pool(4);
  const Problem problem =
      testing::batch_problem(pool, Family::fwd, DType::fp16, Dims{2, 2, 2, 8, 8, 32, 32}).build();
  const KernelConfig kernel = testing::sm80_fwd_config(DType::fp16, 32, 32, 64, 64, 4, 2);
  // Planned without a CUDA context (no function), and absent from the registry.
  const std::string message =
      run_error(one_stage_plan(kernel, nullptr), problem, ErrorKind::no_kernel);
  EXPECT_EQ(message.rfind("kernel " + kernel.name() + " on problem " + problem.describe(), 0), 0u)
      << message;
  EXPECT_NE(message.find("is not in the registry"), std::string::npos) << message;
}

}  // namespace
}  // namespace tilefmha
