// The split-KV combine (kernels/fmha/splitkv_combine.h): merges the partial O/LSE of every split
// into O and LSE and adds the sink logit once. Memory-bound; one pipeline for every arch.
#include "codegen/combine.hpp"
#include "runtime/combine_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"

namespace tilefmha::templates {
namespace {

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              const StageContext&) {
  return codegen::launch_shape_combine(config, problem);
}

void launch(const KernelConfig&, const StageLaunch& launch) {
  fmha::CombineParams params = runtime::make_combine_params(launch.problem, launch.split);
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

}  // namespace

const KernelTemplate& combine_template() {
  static const FunctionTemplate instance(
      {Family::fwd_splitkv_combine, Pipeline::combine, codegen::check_supported_combine,
       codegen::generate_combine_source, codegen::threads_per_block_combine,
       codegen::shared_bytes_combine, launch_shape, launch});
  return instance;
}

}  // namespace tilefmha::templates
