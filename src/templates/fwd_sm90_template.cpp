// The Hopper warp-specialized forward (kernels/fmha/fwd_sm90.h): TMA producer, wgmma consumers,
// one CTA per tile or a persistent grid (the config's launch form).
#include "codegen/fwd_sm90.hpp"
#include "fmha/fwd_sm90_shape.h"
#include "runtime/fwd_sm90_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"

namespace tilefmha::templates {
namespace {

int64_t shared_bytes(const KernelConfig& c) {
  return fmha::sm90_smem_layout(c.hdim_q, c.hdim_v, c.block_m, c.block_n, c.stages).bytes;
}

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              const StageContext& context) {
  return codegen::launch_shape_sm90(config, problem, context.sm_count);
}

// Limits only the problem shows: the kernel folds a positive scale into exp2 where no logits
// hook needs the scaled value first.
std::optional<Rejection> can_implement(const KernelConfig& config, const Problem& problem) {
  const bool scale_folds = !config.softcap && config.bias == BiasKind::none;
  if (scale_folds && problem.scale() < 0)
    return Rejection{"softmax_scale", "softmax_scale = " + std::to_string(problem.scale()) +
                                          ": sm90_ws folds the scale into exp2 and needs it "
                                          "positive"};
  return std::nullopt;
}

void launch(const KernelConfig& config, const StageLaunch& launch) {
  fmha::Sm90FwdParams params =
      runtime::make_fwd_sm90_params(launch.problem, launch.indices, config);
  runtime::bind_sm90_grid(params, config, launch.shape.grid[0]);
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

}  // namespace

const KernelTemplate& fwd_sm90_template() {
  static const FunctionTemplate instance({Family::fwd, Pipeline::sm90_ws,
                                          codegen::check_supported_sm90,
                                          [](const KernelConfig& c) {
                                            return codegen::generate_sm90_source(c);
                                          },
                                          codegen::threads_per_block_sm90, shared_bytes,
                                          launch_shape, launch, can_implement});
  return instance;
}

}  // namespace tilefmha::templates
