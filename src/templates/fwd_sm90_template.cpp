// The Hopper warp-specialized attention (kernels/fmha/fwd_sm90.h): TMA producer, wgmma
// consumers. Family fwd runs one CTA per tile or a persistent grid (the config's launch form);
// family fwd_splitkv runs one CTA per (tile, split) and writes fp32 partials. The paged families
// (fwd_pagedkv, batch_prefill) load each key block from its page of the pool.
#include "codegen/fwd_sm90.hpp"
#include "fmha/fwd_sm90_shape.h"
#include "runtime/fwd_sm90_params.hpp"
#include "templates/attention_templates.hpp"
#include "templates/function_template.hpp"
#include "templates/gpu_limits.hpp"

namespace tilefmha::templates {
namespace {

int64_t shared_bytes(const KernelConfig& c) {
  return codegen::sm90_layout(c).bytes;
}

std::string source(const KernelConfig& config) {
  return codegen::generate_sm90_source(config);
}

jit::LaunchShape launch_shape(const KernelConfig& config, const Problem& problem,
                              const StageContext& context) {
  const int64_t splits = config.family == Family::fwd_splitkv ? context.num_splits : 1;
  jit::LaunchShape shape = codegen::launch_shape_sm90(
      config, problem, codegen::default_sm90_variant(config), context.sm_count, splits);
  // The splits of a tile are consecutive CTAs (fwd_sm90_scheduler.h), one cluster. Clusters of
  // up to 8 launch in stream order: behind the previous call with programmatic dependency, b=1
  // 32/8-head hdim-128 1k-key calls took 0.15-0.25 us longer. Clusters of 16 (b=1 64/8-head
  // hdim-64 8k-key decode) read 10.1 us a call with it and 10.6-10.7 without (H200, one lease,
  // docs/performance.md engine v9).
  constexpr int64_t kStreamOrderedClusterCtas = 8;
  if (context.merge_splits_in_cluster) {
    shape.cluster[0] = static_cast<unsigned>(splits);
    shape.programmatic_dependency = splits > kStreamOrderedClusterCtas;
  }
  return shape;
}

// Pages under 8 keys do not start a TMA box on a whole swizzle atom: the module's gather entry
// reads them row by row.
bool gathers_pages(const Problem& problem) {
  return problem.is_paged() && problem.paged.page_size < codegen::kSm90MinPageSize;
}

// Limits only the problem shows: the kernel folds a positive scale into exp2 where no logits
// hook needs the scaled value first.
std::optional<Rejection> can_implement(const KernelConfig& config, const Problem& problem) {
  if (auto rejection = check_sequence_lengths(problem)) return rejection;
  if (auto rejection = check_sm90_limits(config, problem)) return rejection;
  if (problem.is_paged()) {
    // A key block is whole pages or lies inside one, loaded a box per page; boxes of 8 rows or
    // more start on whole 1024-byte swizzle atoms. Smaller pages are gathered in 16-byte chunks
    // by the producer warpgroup (fmha/fwd_sm90_gather.h), which fp8 kernels keep busy
    // transposing V, and which cannot clip a chunk at a head dim that is not a multiple of 8.
    const int64_t page = problem.paged.page_size, block = config.block_n;
    if (gathers_pages(problem)) {
      const bool fp8 = is_fp8(config.dtype);
      if (fp8 || problem.hdim_q % 8 != 0 || problem.hdim_v % 8 != 0)
        return Rejection{"page_size", "paged.page_size = " + std::to_string(page) +
                                          ": sm90_ws gathers pages under " +
                                          std::to_string(codegen::kSm90MinPageSize) +
                                          " keys in 16-byte chunks, for 16-bit inputs with head "
                                          "dims that are multiples of 8; it runs on sm80_mma"};
    } else if (page % block != 0 && block % page != 0) {
      return Rejection{"page_size", "paged.page_size = " + std::to_string(page) +
                                        ": sm90_ws loads key blocks of " + std::to_string(block) +
                                        " keys a page at a time and needs pages that nest with "
                                        "the block; it runs on sm80_mma"};
    }
  }
  const bool scale_folds = !config.softcap && config.bias == BiasKind::none;
  if (scale_folds && problem.scale() < 0)
    return Rejection{"softmax_scale", "softmax_scale = " + std::to_string(problem.scale()) +
                                          ": sm90_ws folds the scale into exp2 and needs it "
                                          "positive"};
  return std::nullopt;
}

// can_implement admitted only 16-bit kernels for such pages, which all carry the gather entry.
// A plan merges splits in a cluster only where pages are not gathered (heuristics).
std::string entry(const KernelConfig& config, const Problem& problem, const StageContext& context) {
  if (context.merge_splits_in_cluster) return codegen::sm90_cluster_merge_entry(config);
  return gathers_pages(problem) ? codegen::sm90_gather_entry(config) : config.symbol();
}

void launch(const KernelConfig& config, const StageLaunch& launch) {
  const SplitKv* split = config.family == Family::fwd_splitkv ? &launch.split : nullptr;
  fmha::Sm90FwdParams params =
      launch.merges_splits_in_cluster
          ? runtime::make_fwd_sm90_cluster_merge_params(launch.problem, launch.indices, config,
                                                        launch.split.num_splits)
          : runtime::make_fwd_sm90_params(launch.problem, launch.indices, config, split);
  runtime::bind_sm90_grid(params, config, launch.shape.grid[0]);
  void* arguments[] = {&params};
  jit::launch_kernel(launch.function, launch.shape, arguments, launch.stream);
}

TemplateFunctions functions(Family family) {
  return {family,
          Pipeline::sm90_ws,
          codegen::check_supported_sm90,
          source,
          codegen::threads_per_block_sm90,
          shared_bytes,
          launch_shape,
          launch,
          can_implement,
          entry};
}

}  // namespace

const KernelTemplate& fwd_sm90_template() {
  static const FunctionTemplate instance(functions(Family::fwd));
  return instance;
}

const KernelTemplate& splitkv_sm90_template() {
  static const FunctionTemplate instance(functions(Family::fwd_splitkv));
  return instance;
}

const KernelTemplate& pagedkv_sm90_template() {
  static const FunctionTemplate instance(functions(Family::fwd_pagedkv));
  return instance;
}

const KernelTemplate& batch_prefill_sm90_template() {
  static const FunctionTemplate instance(functions(Family::batch_prefill));
  return instance;
}

}  // namespace tilefmha::templates
