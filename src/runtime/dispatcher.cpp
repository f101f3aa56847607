#include "runtime/dispatcher.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "codegen/fwd_sm90.hpp"
#include "jit/cached_compiler.hpp"
#include "jit/target_arch.hpp"
#include "runtime/checked_indices.hpp"
#include "runtime/heuristics.hpp"
#include "runtime/kernel_match.hpp"
#include "runtime/stage_runner.hpp"
#include "templates/template_table.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::runtime {
namespace {

// Launch forms are derived per problem (heuristics::launch_form): a registry entry built in one
// of them is a candidate only in its enumerated form, so one problem's form never leaks into
// another's plan.
KernelConfig enumerated_form(KernelConfig kernel) {
  kernel.persistent = false;
  kernel.pack_gqa = false;
  kernel.accumulate = false;
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
  for (const KernelConfig& listed : pool) {
    const KernelConfig kernel = enumerated_form(listed);
    if (kernel.family != stage || !seen.insert(kernel.name()).second) continue;
    CandidateVerdict verdict{kernel, "", "", 0};
    const std::optional<Rejection> rejection =
        dispatch_rejection(kernel, problem, stage, device_.arch);
    if (rejection) {
      verdict.rejection = rejection->text;
      verdict.rejection_field = rejection->field;
    } else {
      verdict.score = kernel_preference(kernel, problem, device_);
    }
    out.push_back(std::move(verdict));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    if (a.rejection.empty() != b.rejection.empty()) return a.rejection.empty();
    if (a.rejection.empty()) return a.score > b.score;
    return field_depth(a.rejection_field) > field_depth(b.rejection_field);
  });
  return out;
}

const CandidateVerdict& Dispatcher::best_or_throw(const std::vector<CandidateVerdict>& verdicts,
                                                  const Problem& problem, Family stage) const {
  if (!verdicts.empty() && verdicts.front().rejection.empty()) return verdicts.front();
  std::ostringstream message;
  message << "no kernel for stage " << to_string(stage) << " of " << problem.describe() << " on "
          << to_string(device_.arch);
  if (verdicts.empty())
    message << ": no candidate kernels of that family";
  else
    message << "; closest candidates:";
  for (size_t i = 0; i < std::min<size_t>(5, verdicts.size()); ++i)
    message << "\n  " << verdicts[i].kernel.name() << ": " << verdicts[i].rejection;
  throw Error(ErrorKind::no_kernel, message.str());
}

std::vector<CandidateVerdict> Dispatcher::explain(const Problem& problem) const {
  validate(problem);
  std::vector<CandidateVerdict> all;
  for (Family stage : stage_families(problem)) {
    auto stage_verdicts = verdicts(problem, stage);
    all.insert(all.end(), stage_verdicts.begin(), stage_verdicts.end());
  }
  if (split_kv_allowed(problem)) {
    for (Family stage : {Family::fwd_splitkv, Family::fwd_splitkv_combine}) {
      auto stage_verdicts = verdicts(problem, stage);
      all.insert(all.end(), stage_verdicts.begin(), stage_verdicts.end());
    }
  }
  if (appends_then_attends(problem)) {
    auto attention = explain(attention_after_append(problem));
    all.insert(all.end(), attention.begin(), attention.end());
  }
  return all;
}

PlannedStage Dispatcher::prepare_stage(const KernelConfig& kernel, const Problem& problem,
                                       int64_t num_splits, bool merge_splits_in_cluster) {
  const templates::KernelTemplate& kernel_template = templates::kernel_template(kernel);
  registry_.ensure_built(kernel, [&] {
    jit::CompileOptions compile = options_.compile;
    compile.arch = jit::nvrtc_target(kernel.arch);
    compile.line_info = compile.line_info || jit::line_info_requested();
    if (jit::timeline_requested()) compile.defines.push_back("TILEFMHA_TIMELINE");
    for (std::string& define : jit::kernel_defines_requested())
      compile.defines.push_back(std::move(define));
    return jit::compile_cached(kernel.symbol(), kernel_template.source(kernel), compile,
                               options_.cache.get())
        .cubin;
  });
  const templates::StageContext context{device_.sm_count, num_splits, merge_splits_in_cluster};
  PlannedStage stage{kernel,
                     &kernel_template,
                     kernel_template.entry(kernel, problem, context),
                     nullptr,
                     kernel_template.launch_shape(kernel, problem, context),
                     merge_splits_in_cluster};
  // Without a current context (planning on a machine with no GPU) the run loads it instead.
  if (jit::context_is_current()) {
    stage.function = registry_.function(kernel, stage.entry);
    jit::prepare_launch(stage.function, stage.shape);
  }
  return stage;
}

std::optional<PlannedStage> Dispatcher::cluster_merged_stage(const KernelConfig& split_kernel,
                                                             const Problem& problem,
                                                             int64_t num_splits) {
  if (!merges_splits_in_cluster(problem, split_kernel, num_splits)) return std::nullopt;
  KernelConfig kernel = split_kernel;
  kernel.warp_decode = warp_decode_pays(split_kernel, problem, num_splits);
  PlannedStage merged = prepare_stage(kernel, problem, num_splits, true);
  // A grid of no tile still launches one CTA, which no cluster of several divides.
  if (merged.shape.grid[0] % num_splits != 0) return std::nullopt;
  const int64_t capacity =
      merged.function ? jit::max_active_clusters(merged.function, merged.shape) : -1;
  if (!clusters_run_in_one_wave(merged.shape.grid[0] / num_splits, num_splits, capacity,
                                device_.sm_count, codegen::sm90_ctas_per_sm(split_kernel)))
    return std::nullopt;
  return merged;
}

std::shared_ptr<Plan> Dispatcher::build_plan(const Problem& problem, bool own_workspace) {
  auto plan = std::make_shared<Plan>();
  plan->key = PlanKey::of(problem);
  std::ostringstream why;
  auto describe = [&](const CandidateVerdict& best, const PlannedStage& stage, size_t others) {
    why << to_string(stage.kernel.family) << ": " << stage.kernel.name() << " (score " << best.score
        << ", " << others << " other candidates"
        << (stage.kernel.persistent ? "; persistent grid" : "")
        << (stage.kernel.deterministic && !problem.bwd.deterministic ? "; dQ turns" : "")
        << (stage.kernel.pack_gqa ? "; GQA groups packed" : "")
        << (stage.kernel.warp_decode ? "; warp MMAs" : "") << "; grid " << stage.shape.grid[0]
        << "x" << stage.shape.grid[1] << "x" << stage.shape.grid[2] << ")\n";
  };

  // A forward problem runs as split-KV + combine where the one-pass grid leaves the device idle.
  if (split_kv_allowed(problem)) {
    const auto split_verdicts = verdicts(problem, Family::fwd_splitkv);
    const auto combine_verdicts = verdicts(problem, Family::fwd_splitkv_combine);
    const bool splittable = !split_verdicts.empty() && split_verdicts.front().rejection.empty() &&
                            !combine_verdicts.empty() && combine_verdicts.front().rejection.empty();
    if (splittable || problem.split.num_splits > 1) {
      const CandidateVerdict& split_best =
          best_or_throw(split_verdicts, problem, Family::fwd_splitkv);
      const CandidateVerdict& combine_best =
          best_or_throw(combine_verdicts, problem, Family::fwd_splitkv_combine);
      const KernelConfig split_kernel = launch_form(split_best.kernel, problem);
      int64_t splits = choose_num_splits(problem, split_kernel, device_);
      if (splits > 1) {
        std::optional<PlannedStage> merged = cluster_merged_stage(split_kernel, problem, splits);
        // Where these splits need the combine, fewer and longer ones merged may still beat it.
        if (!merged) {
          for (int64_t fewer : merged_split_alternatives(problem, split_kernel, device_, splits)) {
            merged = cluster_merged_stage(split_kernel, problem, fewer);
            if (merged) {
              splits = fewer;
              break;
            }
          }
        }
        plan->num_splits = splits;
        if (merged) {
          plan->stages.push_back(std::move(*merged));
          describe(split_best, plan->stages.back(), split_verdicts.size() - 1);
          why << "split-KV: " << splits << " splits, merged in thread block clusters of " << splits
              << " (no combine stage)\n";
        } else {
          plan->stages.push_back(prepare_stage(split_kernel, problem, splits));
          describe(split_best, plan->stages.back(), split_verdicts.size() - 1);
          plan->stages.push_back(prepare_stage(combine_best.kernel, problem, splits));
          describe(combine_best, plan->stages.back(), combine_verdicts.size() - 1);
          why << "split-KV: " << splits << " splits\n";
        }
      }
    }
  }
  if (plan->stages.empty()) {
    for (Family stage : stage_families(problem)) {
      // A fwd_splitkv problem without O asks for the partials alone; with O the plan merges too.
      if (stage == Family::fwd_splitkv_combine && problem.family == Family::fwd_splitkv &&
          problem.o.empty())
        continue;
      const auto stage_verdicts = verdicts(problem, stage);
      const CandidateVerdict& best = best_or_throw(stage_verdicts, problem, stage);
      plan->stages.push_back(
          prepare_stage(launch_form(best.kernel, problem), problem, problem.split.num_splits));
      describe(best, plan->stages.back(), stage_verdicts.size() - 1);
    }
  }
  // Append -> attend: the attention is planned as its own problem (whatever split or paged form
  // it takes) and nested, so one plan and one workspace serve both.
  if (appends_then_attends(problem)) {
    plan->attention = build_plan(attention_after_append(problem), /*own_workspace=*/false);
    why << "then attention over the appended cache:\n" << plan->attention->explanation;
  }
  const int64_t attention_bytes = plan->attention ? plan->attention->workspace.bytes : 0;
  // Splits merged in clusters leave no partials in the workspace.
  const int64_t partial_splits = plan->splits_merged_in_cluster() ? 1 : plan->num_splits;
  plan->workspace = workspace_layout(problem, partial_splits, attention_bytes,
                                     backward_workspace(problem, plan->stages));
  if (own_workspace && plan->workspace.bytes > 0)
    plan->owned_workspace = std::make_unique<OwnedWorkspace>(plan->workspace.bytes);
  plan->explanation = why.str();
  return plan;
}

std::shared_ptr<const Plan> Dispatcher::plan(const Problem& problem) {
  validate(problem);
  // The backward runs as one plan of its three stages, which a problem of family bwd_dq_dk_dv
  // describes completely; the other two families describe one stage's views only.
  if (problem.family == Family::bwd_dot_do_o || problem.family == Family::bwd_convert_dq)
    throw Error(ErrorKind::not_supported,
                "family = " + std::string(to_string(problem.family)) +
                    ": the GPU runs the backward as one plan of its three stages; plan a problem "
                    "of family bwd_dq_dk_dv",
                "family");
  const PlanKey key = PlanKey::of(problem);
  {
    std::shared_lock lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  }
  // Planning (and compiling) runs unlocked; a racing planner of the same key builds an
  // equivalent plan and the first one stored wins. Kernels still build once (Registry).
  std::shared_ptr<const Plan> plan = build_plan(problem);
  std::unique_lock lock(mutex_);
  return plans_.try_emplace(key, std::move(plan)).first->second;
}

void Dispatcher::run(const Plan& plan, const Problem& problem, jit::CUstream stream,
                     jit::CUdeviceptr workspace) const {
  if (problem.device_indices.checked && problem.device_indices.any())
    check_device_indices(problem, stream);
  if (plan.workspace.bytes == 0 || workspace != 0 || !plan.owned_workspace) {
    run_stages(plan, problem, registry_, stream, workspace);
    return;
  }
  plan.owned_workspace->use(
      stream, [&](jit::CUdeviceptr owned) { run_stages(plan, problem, registry_, stream, owned); });
}

}  // namespace tilefmha::runtime
