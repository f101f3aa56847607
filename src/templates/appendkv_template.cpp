// Append-KV (kernels/fmha/appendkv.h): new K/V tokens into a contiguous or paged cache, RoPE on
// the new keys and on Q in place, one launch. Memory-bound; one pipeline for every arch. As the
// first stage of an append -> attend plan it also writes the key counts after the append into
// the plan workspace, where the attention stage reads them.
#include "codegen/appendkv.hpp"
#include "runtime/appendkv_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"

namespace tilefmha::templates {
namespace {

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              const StageContext&) {
  return codegen::launch_shape_appendkv(config, problem);
}

// Limits only the problem shows: the kernel walks batch-mode rows and indexes a row's dims in
// int.
std::optional<Rejection> can_implement(const KernelConfig&, const Problem& problem) {
  if (problem.mode != Mode::batch)
    return Rejection{"mode", "mode = group: the GPU append-KV kernel runs in batch mode"};
  return std::nullopt;
}

void launch(const KernelConfig&, const StageLaunch& launch) {
  fmha::AppendKvParams params =
      runtime::make_appendkv_params(launch.problem, launch.indices, launch.key_lengths_after);
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

}  // namespace

const KernelTemplate& appendkv_template() {
  static const FunctionTemplate instance(
      {Family::fwd_appendkv, Pipeline::appendkv, codegen::check_supported_appendkv,
       codegen::generate_appendkv_source, codegen::threads_per_block_appendkv,
       codegen::shared_bytes_appendkv, launch_shape, launch, can_implement});
  return instance;
}

}  // namespace tilefmha::templates
