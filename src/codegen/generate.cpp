// The generic codegen entry points: one switch on the pipeline, so adding a kernel template
// means one case here and one file of its own.
#include "codegen/generate.hpp"

#include "codegen/fwd_simt.hpp"
#include "codegen/fwd_sm80.hpp"
#include "codegen/fwd_sm90.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::codegen {
namespace {

[[noreturn]] void no_template(const KernelConfig& config) {
  throw Error(ErrorKind::not_supported,
              "pipeline = " + std::string(to_string(config.pipeline)) + " for family " +
                  std::string(to_string(config.family)) +
                  ": codegen implements fwd on sm80_mma, sm90_ws and simt_f32 only");
}

bool is_forward(const KernelConfig& config) {
  return config.family == Family::fwd;
}

}  // namespace

void check_supported(const KernelConfig& config) {
  if (config.pipeline == Pipeline::sm90_ws && is_forward(config))
    return check_supported_sm90(config);
  if (config.pipeline == Pipeline::sm80_mma) return check_supported_sm80(config);
  if (config.pipeline == Pipeline::simt_f32) return check_supported_simt(config);
  no_template(config);
}

std::string generate_source(const KernelConfig& config) {
  if (config.pipeline == Pipeline::sm90_ws && is_forward(config))
    return generate_sm90_source(config);
  if (config.pipeline == Pipeline::sm80_mma) return generate_sm80_source(config);
  if (config.pipeline == Pipeline::simt_f32) return generate_simt_source(config);
  no_template(config);
}

int threads_per_block(const KernelConfig& config) {
  if (config.pipeline == Pipeline::sm90_ws && is_forward(config))
    return threads_per_block_sm90(config);
  if (config.pipeline == Pipeline::sm80_mma) return threads_per_block_sm80(config);
  if (config.pipeline == Pipeline::simt_f32) return threads_per_block_simt(config);
  no_template(config);
}

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              int64_t sm_count) {
  if (config.pipeline == Pipeline::sm90_ws && is_forward(config))
    return launch_shape_sm90(config, problem, sm_count);
  if (config.pipeline == Pipeline::sm80_mma) return launch_shape_sm80(config, problem);
  if (config.pipeline == Pipeline::simt_f32) return launch_shape_simt(config, problem);
  no_template(config);
}

}  // namespace tilefmha::codegen
