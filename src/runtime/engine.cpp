#include "tilefmha/engine.hpp"

#include <algorithm>
#include <sstream>

#include "jit/kernel_cache.hpp"
#include "jit/module.hpp"
#include "runtime/candidates.hpp"
#include "runtime/device_info.hpp"
#include "runtime/dispatcher.hpp"
#include "runtime/registry.hpp"
#include "templates/template_table.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

std::unique_ptr<jit::GpuContext> open_context(int device) {
  if (const std::string why = jit::gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorKind::invalid_argument, "the GPU backend is unavailable: " + why);
  return std::make_unique<jit::GpuContext>(device);
}

}  // namespace

struct Engine::State {
  int device = 0;
  std::unique_ptr<jit::GpuContext> context;
  runtime::Registry registry;
  std::unique_ptr<runtime::Dispatcher> dispatcher;
};

int64_t EnginePlan::workspace_bytes() const {
  return plan_ ? plan_->workspace.bytes : 0;
}
int64_t EnginePlan::num_stages() const {
  return static_cast<int64_t>(kernels().size());
}
int64_t EnginePlan::num_splits() const {
  return plan_ ? plan_->num_splits : 1;
}
bool EnginePlan::splits_merged_in_cluster() const {
  return plan_ && plan_->splits_merged_in_cluster();
}
const std::string& EnginePlan::explanation() const {
  static const std::string none;
  return plan_ ? plan_->explanation : none;
}

std::vector<KernelConfig> EnginePlan::kernels() const {
  std::vector<KernelConfig> out;
  // An append -> attend plan launches its nested attention plan after its own stages.
  for (const runtime::Plan* plan = plan_.get(); plan != nullptr; plan = plan->attention.get())
    for (const runtime::PlannedStage& stage : plan->stages) out.push_back(stage.kernel);
  return out;
}

Engine::Engine(EngineOptions options) : state_(std::make_unique<State>()) {
  state_->device = options.device;
  state_->context = open_context(options.device);
  const runtime::DeviceInfo device{
      runtime::arch_for_compute_capability(state_->context->compute_capability()),
      state_->context->multiprocessor_count(), state_->context->device_name()};
  runtime::DispatcherOptions dispatch;
  // The profile's kernels of every family some template can build.
  if (!options.only_listed)
    dispatch.candidates =
        runtime::default_candidates(device.arch, templates::template_families(), options.profile);
  dispatch.candidates.insert(dispatch.candidates.end(), options.kernels.begin(),
                             options.kernels.end());
  if (options.pipeline)
    std::erase_if(dispatch.candidates, [&](const KernelConfig& config) {
      // The combine, append-KV and the backward row kernels have their own pipelines; they stay
      // whatever pipeline the attention uses.
      return config.pipeline != *options.pipeline && config.family != Family::fwd_splitkv_combine &&
             config.family != Family::fwd_appendkv && config.family != Family::bwd_dot_do_o &&
             config.family != Family::bwd_convert_dq;
    });
  if (options.disk_cache)
    dispatch.cache = std::make_shared<jit::KernelCache>(
        options.cache_dir.empty() ? jit::KernelCache::default_directory()
                                  : std::filesystem::path(options.cache_dir));
  state_->dispatcher =
      std::make_unique<runtime::Dispatcher>(state_->registry, device, std::move(dispatch));
}

Engine::~Engine() = default;

EnginePlan Engine::plan(const Problem& problem) {
  state_->context->make_current();
  EnginePlan plan;
  plan.plan_ = state_->dispatcher->plan(problem);
  return plan;
}

void Engine::run(const EnginePlan& plan, const Problem& problem, void* stream, void* workspace) {
  if (!plan.plan_) throw Error(ErrorKind::invalid_argument, "run: the plan is empty");
  state_->context->make_current();
  state_->dispatcher->run(*plan.plan_, problem, static_cast<jit::CUstream>(stream),
                          static_cast<jit::CUdeviceptr>(reinterpret_cast<uintptr_t>(workspace)));
}

EnginePlan Engine::run(const Problem& problem, void* stream) {
  EnginePlan planned = plan(problem);
  run(planned, problem, stream);
  return planned;
}

void Engine::merge_states(const MergeStates& states, void* stream) {
  run(merge_states_problem(states), stream);
}

std::string Engine::explain(const Problem& problem) const {
  std::ostringstream out;
  for (const auto& verdict : state_->dispatcher->explain(problem)) {
    out << (verdict.rejection.empty() ? "fits  " : "      ") << verdict.kernel.name();
    if (verdict.rejection.empty())
      out << " (score " << verdict.score << ")";
    else
      out << ": " << verdict.rejection;
    out << '\n';
  }
  return out.str();
}

std::vector<KernelVerdict> Engine::verdicts(const Problem& problem) const {
  std::vector<KernelVerdict> out;
  for (auto& verdict : state_->dispatcher->explain(problem))
    out.push_back({std::move(verdict.kernel), std::move(verdict.rejection), verdict.score});
  return out;
}

std::string Engine::device_name() const {
  return state_->dispatcher->device().name;
}

int Engine::sm_count() const {
  return state_->dispatcher->device().sm_count;
}

int Engine::device() const {
  return state_->device;
}

}  // namespace tilefmha
