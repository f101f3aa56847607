// The portable tensor-core attention (kernels/fmha/fwd_sm80.h): one CTA per (query block, query
// head, sequence), and per split for family fwd_splitkv, which writes fp32 partials. The paged
// families (fwd_pagedkv, batch_prefill) are the same kernel reading K/V through a page table.
#include "codegen/fwd_sm80.hpp"
#include "fmha/fwd_shape.h"
#include "runtime/fwd_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"
#include "templates/gpu_limits.hpp"

namespace tilefmha::templates {
namespace {

int64_t shared_bytes(const KernelConfig& c) {
  return fmha::fwd_sm80_shared_bytes(c.hdim_q, c.hdim_v, c.block_m, c.block_n, c.stages,
                                     static_cast<int>(dtype_size(c.dtype)));
}

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              const StageContext& context) {
  const int64_t splits = config.family == Family::fwd_splitkv ? context.num_splits : 1;
  return codegen::launch_shape_sm80(config, problem, splits);
}

// Limits only the problem shows: 32-bit sequence lengths.
std::optional<Rejection> can_implement(const KernelConfig&, const Problem& problem) {
  return check_sequence_lengths(problem);
}

void launch(const KernelConfig& config, const StageLaunch& launch) {
  const SplitKv* split = config.family == Family::fwd_splitkv ? &launch.split : nullptr;
  fmha::FwdParams params =
      runtime::make_fwd_params(launch.problem, launch.indices, Pipeline::sm80_mma, split);
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

TemplateFunctions functions(Family family) {
  return {family,
          Pipeline::sm80_mma,
          codegen::check_supported_sm80,
          codegen::generate_sm80_source,
          codegen::threads_per_block_sm80,
          shared_bytes,
          launch_shape,
          launch,
          can_implement};
}

}  // namespace

const KernelTemplate& fwd_sm80_template() {
  static const FunctionTemplate instance(functions(Family::fwd));
  return instance;
}

const KernelTemplate& splitkv_sm80_template() {
  static const FunctionTemplate instance(functions(Family::fwd_splitkv));
  return instance;
}

const KernelTemplate& pagedkv_sm80_template() {
  static const FunctionTemplate instance(functions(Family::fwd_pagedkv));
  return instance;
}

const KernelTemplate& batch_prefill_sm80_template() {
  static const FunctionTemplate instance(functions(Family::batch_prefill));
  return instance;
}

}  // namespace tilefmha::templates
