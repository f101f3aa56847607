// The generic codegen entry points ask the kernel-template table (src/templates/): a new family
// or pipeline needs no change here.
#include "codegen/generate.hpp"

#include "templates/template_table.hpp"

namespace tilefmha::codegen {

void check_supported(const KernelConfig& config) {
  templates::kernel_template(config);
}

std::string generate_source(const KernelConfig& config) {
  return templates::kernel_template(config).source(config);
}

int threads_per_block(const KernelConfig& config) {
  return templates::kernel_template(config).threads(config);
}

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              int64_t sm_count) {
  return templates::kernel_template(config).launch_shape(config, problem, {sm_count, 1});
}

}  // namespace tilefmha::codegen
