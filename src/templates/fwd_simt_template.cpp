// The fp32 CUDA-core forward (kernels/fmha/fwd_simt.h): the accurate path, no tensor cores.
#include "codegen/fwd_simt.hpp"
#include "fmha/fwd_simt_shape.h"
#include "runtime/fwd_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"
#include "templates/gpu_limits.hpp"

namespace tilefmha::templates {
namespace {

int64_t shared_bytes(const KernelConfig& c) {
  return fmha::fwd_simt_shared_bytes(c.hdim_q, c.hdim_v, c.block_m, c.block_n);
}

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              const StageContext&) {
  return codegen::launch_shape_simt(config, problem);
}

// Limits only the problem shows: 32-bit sequence lengths.
std::optional<Rejection> can_implement(const KernelConfig&, const Problem& problem) {
  return check_sequence_lengths(problem);
}

void launch(const KernelConfig&, const StageLaunch& launch) {
  fmha::FwdParams params =
      runtime::make_fwd_params(launch.problem, launch.indices, Pipeline::simt_f32);
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

}  // namespace

const KernelTemplate& fwd_simt_template() {
  static const FunctionTemplate instance(
      {Family::fwd, Pipeline::simt_f32, codegen::check_supported_simt,
       codegen::generate_simt_source, codegen::threads_per_block_simt, shared_bytes, launch_shape,
       launch, can_implement});
  return instance;
}

}  // namespace tilefmha::templates
