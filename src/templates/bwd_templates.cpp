// The three backward stages: bwd_dot_do_o (D = rowsum(dO * O), and zeroes the dQ accumulator),
// bwd_dq_dk_dv on sm80_mma (kernels/fmha/bwd_sm80.h) and bwd_convert_dq (fp32 dQ -> dtype).
// The row kernels are memory-bound and have their own pipelines, like the split-KV combine.
#include "codegen/bwd.hpp"
#include "jit/cuda_driver.hpp"
#include "runtime/bwd_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"
#include "templates/gpu_limits.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::templates {
namespace {

jit::LaunchShape rows_shape(const KernelConfig& config, const Problem& problem,
                            const StageContext&) {
  return codegen::launch_shape_bwd_rows(config, problem);
}

jit::LaunchShape sm80_shape(const KernelConfig& config, const Problem& problem,
                            const StageContext&) {
  return codegen::launch_shape_bwd_sm80(config, problem);
}

void launch(const KernelConfig& config, const StageLaunch& launch) {
  if (launch.backward == nullptr)
    throw Error(ErrorKind::invalid_argument,
                "stage " + std::string(to_string(config.family)) +
                    " launched without its D / dQ accumulator (a backward plan binds them)");
  fmha::BwdParams params =
      runtime::make_bwd_params(launch.problem, launch.indices, *launch.backward);
  if (config.family == Family::bwd_convert_dq && params.dq == nullptr)
    throw Error(ErrorKind::invalid_problem, "bwd.dq is not set (bwd_convert_dq writes it)",
                "bwd.dq");
  if (config.family == Family::bwd_dq_dk_dv && (params.dk == nullptr || params.dv == nullptr))
    throw Error(ErrorKind::invalid_problem,
                "bwd.dk and bwd.dv must be set (bwd_dq_dk_dv writes them)", "bwd.dk");
  // A broadcast dBias is summed atomically: it starts from zero on the launch's stream.
  if (config.family == Family::bwd_dq_dk_dv && params.dbias_accumulate != 0) {
    const runtime::DbiasWrites writes = runtime::dbias_writes(launch.problem);
    jit::check_cuda(
        jit::cuda_driver().memset_d8_async(reinterpret_cast<jit::CUdeviceptr>(params.dbias), 0,
                                           static_cast<size_t>(writes.zero_bytes), launch.stream),
        "cuMemsetD8Async (bwd.dbias)");
  }
  // Group mode: the plan's row grid and its D / dQ workspace hold batch x seqlen_q tokens (the
  // bound its key fixes); a packed Q with more rows would overrun them.
  const Problem& p = launch.problem;
  if (p.mode == Mode::group && p.query_rows() > p.batch * p.seqlen_q)
    throw Error(ErrorKind::invalid_problem,
                "q holds " + std::to_string(p.query_rows()) + " packed tokens, more than batch x " +
                    "seqlen_q = " + std::to_string(p.batch * p.seqlen_q) +
                    " (seqlen_q is the longest sequence)",
                "seqlen_q");
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

std::optional<Rejection> rows_limits(const KernelConfig& config, const Problem& problem) {
  if (auto rejection = check_backward_problem(problem)) return rejection;
  if (config.family == Family::bwd_convert_dq && problem.bwd.dq.empty())
    return Rejection{"bwd.dq", "bwd.dq: not set, but the plan's last stage writes dQ into it"};
  return std::nullopt;
}

std::optional<Rejection> sm80_limits(const KernelConfig&, const Problem& problem) {
  if (auto rejection = check_backward_problem(problem)) return rejection;
  if (const std::string why = runtime::dbias_refusal(problem); !why.empty())
    return Rejection{"bwd.dbias", why};
  return std::nullopt;
}

TemplateFunctions rows_functions(Family family, Pipeline pipeline) {
  return {family,
          pipeline,
          codegen::check_supported_bwd_rows,
          codegen::generate_bwd_rows_source,
          codegen::threads_per_block_bwd,
          codegen::shared_bytes_bwd_rows,
          rows_shape,
          launch,
          rows_limits};
}

}  // namespace

const KernelTemplate& bwd_dot_do_o_template() {
  static const FunctionTemplate instance(
      rows_functions(Family::bwd_dot_do_o, Pipeline::bwd_dot_do_o));
  return instance;
}

const KernelTemplate& bwd_dq_dk_dv_sm80_template() {
  static const FunctionTemplate instance(
      {Family::bwd_dq_dk_dv, Pipeline::sm80_mma, codegen::check_supported_bwd_sm80,
       codegen::generate_bwd_sm80_source, codegen::threads_per_block_bwd,
       codegen::shared_bytes_bwd_sm80, sm80_shape, launch, sm80_limits});
  return instance;
}

const KernelTemplate& bwd_convert_dq_template() {
  static const FunctionTemplate instance(
      rows_functions(Family::bwd_convert_dq, Pipeline::bwd_convert_dq));
  return instance;
}

}  // namespace tilefmha::templates
