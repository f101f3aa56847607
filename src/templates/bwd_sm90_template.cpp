// The Hopper backward (bwd_dq_dk_dv on sm90_ws, kernels/fmha/bwd_sm90.h): TMA producer, two wgmma
// consumer warpgroups (64 keys each, or at hdim 256 half the columns of 64 shared keys). It runs
// between the portable row stages (bwd_dot_do_o, bwd_convert_dq) in the backward's three-stage
// plan; problems it cannot take fall back to sm80_mma through the dispatcher's candidate list.
#include "codegen/bwd_sm90.hpp"
#include "runtime/bwd_sm90_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"
#include "templates/gpu_limits.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::templates {
namespace {

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              const StageContext& context) {
  return codegen::launch_shape_bwd_sm90(config, problem, context.sm_count);
}

std::optional<Rejection> can_implement(const KernelConfig& config, const Problem& problem) {
  if (auto rejection = check_backward_problem(problem)) return rejection;
  // The kernel adds whole query blocks with one bulk copy into its own (head-major,
  // chunk-swizzled) accumulator in plan workspace.
  if (!problem.bwd.dq_acc.empty() && !problem.bwd.deterministic)
    return Rejection{"bwd.dq_acc",
                     "bwd.dq_acc: sm90_ws keeps dQ in its own workspace layout; a caller-given "
                     "accumulator runs on sm80_mma"};
  if (problem.bwd.dk.empty() || problem.bwd.dv.empty())
    return Rejection{"bwd.dk", "bwd.dk and bwd.dv must be set (bwd_dq_dk_dv writes them)"};
  // TMA addresses packed tokens with int32 coordinates, and needs 16-byte strides.
  for (const auto& [field, view] :
       {std::pair{"q", &problem.q}, std::pair{"k", &problem.k}, std::pair{"v", &problem.v}}) {
    if (view->rank == 4 && view->shape[1] >= kMaxTmaRows)
      return Rejection{std::string(field) + ".shape",
                       std::string(field) + ".shape[1] = " + std::to_string(view->shape[1]) +
                           ": sm90_ws addresses rows with int32 TMA coordinates"};
  }
  if (auto rejection = rejection_of([&] { runtime::check_bwd_sm90_views(problem, config); }))
    return rejection;
  return std::nullopt;
}

void launch(const KernelConfig& config, const StageLaunch& launch) {
  if (launch.backward == nullptr)
    throw Error(ErrorKind::invalid_argument,
                "stage bwd_dq_dk_dv launched without its D / dQ accumulator (a backward plan "
                "binds them)");
  fmha::Sm90BwdParams params =
      runtime::make_bwd_sm90_params(launch.problem, launch.indices, *launch.backward, config);
  if (params.base.dk == nullptr || params.base.dv == nullptr)
    throw Error(ErrorKind::invalid_problem,
                "bwd.dk and bwd.dv must be set (bwd_dq_dk_dv writes them)", "bwd.dk");
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

}  // namespace

const KernelTemplate& bwd_dq_dk_dv_sm90_template() {
  static const FunctionTemplate instance(
      {Family::bwd_dq_dk_dv, Pipeline::sm90_ws, codegen::check_supported_bwd_sm90,
       codegen::generate_bwd_sm90_source, codegen::threads_per_block_bwd_sm90,
       codegen::shared_bytes_bwd_sm90, launch_shape, launch, can_implement});
  return instance;
}

}  // namespace tilefmha::templates
