#include "runtime/dispatcher.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "codegen/fwd_sm90.hpp"
#include "codegen/generate.hpp"
#include "jit/cached_compiler.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/target_arch.hpp"
#include "runtime/device_indices.hpp"
#include "runtime/fwd_params.hpp"
#include "runtime/fwd_sm90_params.hpp"
#include "runtime/kernel_match.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::runtime {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Higher is better among kernels that fit: the fastest pipeline, the least head-dim padding,
// no predication the problem does not need, then a tile that fills the SMs in whole waves.
double preference(const KernelConfig& kernel, const Problem& problem, const DeviceInfo& device) {
  double score = 0;
  if (kernel.pipeline == Pipeline::sm90_ws) score += 1000;
  if (kernel.pipeline == Pipeline::sm80_mma) score += 500;
  score -= 2.0 * ((kernel.hdim_q - problem.hdim_q) + (kernel.hdim_v - problem.hdim_v));
  const bool ragged_q = problem.mode == Mode::group || problem.seqlen_q % kernel.block_m != 0;
  const bool ragged_k = problem.mode == Mode::group || !problem.seqlen_k_per_batch.empty() ||
                        problem.seqlen_k % kernel.block_n != 0;
  // Predicated loads cost the portable pipeline; TMA bounds-checks sequence tiles for free.
  const bool padding_costs = kernel.pipeline != Pipeline::sm90_ws;
  if (padding_costs && kernel.pad_seqlen_q && !ragged_q) score -= 20;
  if (padding_costs && kernel.pad_seqlen_k && !ragged_k) score -= 20;
  if ((kernel.pad_hdim_q && kernel.hdim_q == problem.hdim_q) ||
      (kernel.pad_hdim_v && kernel.hdim_v == problem.hdim_v))
    score -= 10;
  const int64_t ctas = problem.batch * problem.nhead_q * ceil_div(problem.seqlen_q, kernel.block_m);
  const int64_t waves = std::max<int64_t>(1, ceil_div(ctas, device.sm_count));
  const double wave_efficiency = static_cast<double>(ctas) / (waves * device.sm_count);
  score += 100 * wave_efficiency;
  // Bigger tiles amortize the K/V traffic once the grid fills the machine; key blocks wider
  // than 128 pay off only on long rows: from 8k keys unmasked, from 16k causal (sm90_ws at
  // hdim 128: below those the 128-wide tile, whose O buffer fits beside its rings, runs on a
  // persistent grid and wins; docs/performance.md).
  if (ctas >= device.sm_count) score += kernel.block_m / 16.0 + kernel.block_n / 32.0;
  const int64_t long_rows = problem.mask.kind == MaskKind::none ? 8192 : 16384;
  if (kernel.block_n > 128 && problem.seqlen_k < long_rows) score -= 10;
  // Masked short rows: few key blocks per query block, so the 192-row tile's extra masked work
  // and fewer, longer tiles lose to 128 rows (sm90_ws hdim 64 causal up to 2k: +13-15%).
  if (kernel.block_m > 128 && problem.mask.kind != MaskKind::none && problem.seqlen_q <= 2048)
    score -= 10;
  // Masked rows of 512 to 2k on one-consumer tiles that share an SM two CTAs at a time: one
  // CTA's tile ramp and epilogue run under the other's main loop (sm90_ws hdim 64 causal: 64
  // rows beat 128 by 1-5% and 192 by 8-49%).
  const bool masked_short =
      problem.mask.kind != MaskKind::none && problem.seqlen_q >= 512 && problem.seqlen_q <= 2048;
  if (masked_short && kernel.pipeline == Pipeline::sm90_ws && codegen::sm90_ctas_per_sm(kernel) > 1)
    score += 6;
  score += kernel.stages;  // deeper pipelines hide latency when shared memory allows
  return score;
}

// The kernel as launched: an sm90_ws forward kernel runs in its persistent form (CTAs looping
// over tiles on every CTA slot of the SMs) where that pays for the problem.
KernelConfig launch_form(KernelConfig kernel, const Problem& problem) {
  if (kernel.pipeline != Pipeline::sm90_ws || kernel.family != Family::fwd) return kernel;
  if (codegen::sm90_pack_gqa_pays(kernel, problem))
    kernel.pack_gqa = true;  // short rows: one CTA per packed tile
  else if (codegen::sm90_persistent_grid_pays(kernel, problem))
    kernel.persistent = true;
  return kernel;
}

}  // namespace

Dispatcher::Dispatcher(Registry& registry, DeviceInfo device, DispatcherOptions options)
    : registry_(registry), device_(std::move(device)), options_(std::move(options)) {}

std::vector<CandidateVerdict> Dispatcher::verdicts(const Problem& problem, Family stage) const {
  std::vector<KernelConfig> pool = registry_.configs(device_.arch);
  for (const auto& candidate : options_.candidates) pool.push_back(candidate);
  std::set<std::string> seen;
  std::vector<CandidateVerdict> out;
  for (const auto& kernel : pool) {
    if (kernel.family != stage || !seen.insert(kernel.name()).second) continue;
    CandidateVerdict verdict{
        kernel, rejection_reason(kernel, problem, stage, device_.arch).value_or(""), 0};
    if (verdict.rejection.empty()) {
      try {
        codegen::check_supported(kernel);
        verdict.score = preference(kernel, problem, device_);
      } catch (const Error& e) {
        verdict.rejection = std::string("codegen: ") + e.what();
      }
    }
    out.push_back(std::move(verdict));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    if (a.rejection.empty() != b.rejection.empty()) return a.rejection.empty();
    if (a.rejection.empty()) return a.score > b.score;
    return match_depth(a.rejection) > match_depth(b.rejection);
  });
  return out;
}

std::vector<CandidateVerdict> Dispatcher::explain(const Problem& problem) const {
  validate(problem);
  std::vector<CandidateVerdict> all;
  for (Family stage : stage_families(problem)) {
    auto stage_verdicts = verdicts(problem, stage);
    all.insert(all.end(), stage_verdicts.begin(), stage_verdicts.end());
  }
  return all;
}

void Dispatcher::ensure_built(const KernelConfig& kernel) {
  if (registry_.is_built(kernel)) return;
  jit::CompileOptions compile = options_.compile;
  compile.arch = jit::nvrtc_target(kernel.arch);
  auto built = jit::compile_cached(kernel.symbol(), codegen::generate_source(kernel), compile,
                                   options_.cache.get());
  registry_.add(kernel, std::move(built.cubin));
}

std::shared_ptr<const Plan> Dispatcher::plan(const Problem& problem) {
  validate(problem);
  const std::string signature = problem_signature(problem);
  {
    std::lock_guard lock(mutex_);
    if (auto it = plans_.find(signature); it != plans_.end()) return it->second;
  }
  auto plan = std::make_shared<Plan>();
  plan->signature = signature;
  std::ostringstream why;
  for (Family stage : stage_families(problem)) {
    const auto stage_verdicts = verdicts(problem, stage);
    if (stage_verdicts.empty() || !stage_verdicts.front().rejection.empty()) {
      std::ostringstream message;
      message << "no kernel for stage " << to_string(stage) << " of " << problem.describe()
              << " on " << to_string(device_.arch);
      if (stage_verdicts.empty())
        message << ": no candidate kernels of that family";
      else
        message << "; closest candidates:";
      for (size_t i = 0; i < std::min<size_t>(5, stage_verdicts.size()); ++i)
        message << "\n  " << stage_verdicts[i].kernel.name() << ": " << stage_verdicts[i].rejection;
      throw Error(ErrorKind::no_kernel, message.str());
    }
    const auto& best = stage_verdicts.front();
    const KernelConfig kernel = launch_form(best.kernel, problem);
    ensure_built(kernel);
    plan->stages.push_back({kernel, codegen::launch_shape(kernel, problem, device_.sm_count)});
    why << to_string(stage) << ": " << kernel.name() << " (score " << best.score << ", "
        << (stage_verdicts.size() - 1) << " other candidates"
        << (kernel.persistent && !best.kernel.persistent ? "; persistent grid" : "")
        << (kernel.pack_gqa && !best.kernel.pack_gqa ? "; GQA groups packed" : "") << ")\n";
  }
  plan->explanation = why.str();
  std::lock_guard lock(mutex_);
  return plans_.try_emplace(signature, std::move(plan)).first->second;
}

void Dispatcher::run(const Plan& plan, const Problem& problem, jit::CUstream stream) {
  for (const auto& stage : plan.stages) {
    if (stage.kernel.family != Family::fwd)
      throw Error(ErrorKind::not_supported, "running " +
                                                std::string(to_string(stage.kernel.family)) +
                                                " kernels on the GPU is not implemented yet");
    // Index metadata lives in host vectors; it can change between calls of one signature.
    const DeviceIndexVectors uploads(problem);
    const FwdDeviceIndices& indices = uploads.pointers();
    const jit::CUfunction function = registry_.function(stage.kernel);
    if (stage.kernel.pipeline == Pipeline::sm90_ws) {
      fmha::Sm90FwdParams params = make_fwd_sm90_params(problem, indices, stage.kernel);
      bind_sm90_grid(params, stage.kernel, stage.shape.grid[0]);
      void* arguments[] = {&params};
      jit::launch_kernel(function, stage.shape, arguments, stream);
    } else {
      fmha::FwdParams params = make_fwd_params(problem, indices, stage.kernel.pipeline);
      void* arguments[] = {&params};
      jit::launch_kernel(function, stage.shape, arguments, stream);
    }
    // The uploads are freed at scope end, so the launch must have consumed them.
    if (!uploads.empty()) jit::check_cuda(jit::cuda_driver().ctx_synchronize(), "cuCtxSynchronize");
  }
}

}  // namespace tilefmha::runtime
