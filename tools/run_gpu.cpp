#include "run_gpu.hpp"

#include <chrono>
#include <cstdio>
#include <memory>

#include "core/numeric.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/kernel_cache.hpp"
#include "run_files.hpp"
#include "runtime/candidates.hpp"
#include "runtime/device_info.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/dispatcher.hpp"
#include "runtime/kernel_match.hpp"
#include "runtime/tolerance.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::cli {
namespace {

// A host buffer shaped like `like`, contiguous, for the reference's copy of an output.
struct HostCopy {
  std::vector<std::byte> bytes;
  TensorView view;
  explicit HostCopy(const TensorView& like) : view(like) {
    if (like.empty()) return;
    int64_t running = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
      view.stride[d] = running;
      running *= view.shape[d];
    }
    bytes.resize(static_cast<size_t>(running * dtype_size(view.dtype)));
    view.data = bytes.data();
  }
};

runtime::Agreement compare(const TensorView& gpu, const TensorView& ref, runtime::Tolerance tol) {
  runtime::Agreement agreement;
  std::vector<double> reference_values;
  reference_values.reserve(static_cast<size_t>(ref.numel()));
  for_each_element(ref, [&](int64_t, int64_t offset) {
    reference_values.push_back(numeric::load(ref.data, ref.dtype, offset));
  });
  for_each_element(gpu, [&](int64_t linear, int64_t offset) {
    agreement.add(numeric::load(gpu.data, gpu.dtype, offset), reference_values[linear], tol);
  });
  return agreement;
}

std::string agreement_line(const char* name, const runtime::Agreement& a, runtime::Tolerance t) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "%s: max abs err %.3g, max rel err %.3g, %lld of %lld outside atol %.3g + rtol "
                "%.3g*|ref|",
                name, a.max_abs_error, a.max_rel_error, static_cast<long long>(a.mismatches),
                static_cast<long long>(a.compared), t.atol, t.rtol);
  return line;
}

}  // namespace

GpuRun run_on_gpu(const std::vector<Problem>& stages, std::optional<Pipeline> pipeline) {
  for (const Problem& stage : stages)
    if (stage.family != Family::fwd)
      throw Error(ErrorKind::not_supported,
                  "--backend gpu runs family fwd only so far (asked for " +
                      std::string(to_string(stage.family)) + "); use --backend cpu");
  if (const std::string why = jit::gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorKind::invalid_argument, "--backend gpu: " + why);

  jit::GpuContext context;
  const runtime::DeviceInfo device = runtime::query_current_device();
  runtime::Registry registry;
  runtime::DispatcherOptions options;
  options.candidates = runtime::default_candidates(device.arch, {Family::fwd});
  if (pipeline)
    std::erase_if(options.candidates,
                  [&](const KernelConfig& config) { return config.pipeline != *pipeline; });
  options.cache = std::make_shared<jit::KernelCache>(jit::KernelCache::default_directory());
  runtime::Dispatcher dispatcher(registry, device, options);

  GpuRun result;
  result.device_name = device.name;
  for (const Problem& stage : stages) {
    runtime::DeviceMirror mirror(stage);
    const auto plan = dispatcher.plan(mirror.device_problem());
    result.explanation += plan->explanation;
    dispatcher.run(*plan, mirror.device_problem());  // first run: module load
    context.synchronize();
    const auto start = std::chrono::steady_clock::now();
    dispatcher.run(*plan, mirror.device_problem());
    context.synchronize();
    result.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    mirror.copy_outputs_to(stage);
  }
  return result;
}

Validation validate_against_reference(const std::vector<Problem>& stages) {
  Validation validation;
  for (const Problem& stage : stages) {
    Problem on_cpu = stage;
    HostCopy o(stage.o), lse(stage.lse);
    on_cpu.o = o.view;
    on_cpu.lse = lse.view;
    reference::run(on_cpu);
    const auto o_tolerance = runtime::output_tolerance(stage.out_dtype);
    const auto o_agreement = compare(stage.o, o.view, o_tolerance);
    validation.passed = validation.passed && o_agreement.mismatches == 0;
    validation.report += agreement_line("o", o_agreement, o_tolerance) + "\n";
    if (!stage.lse.empty()) {
      const auto lse_agreement = compare(stage.lse, lse.view, runtime::kLseTolerance);
      validation.passed = validation.passed && lse_agreement.mismatches == 0;
      validation.report += agreement_line("lse", lse_agreement, runtime::kLseTolerance) + "\n";
    }
  }
  return validation;
}

}  // namespace tilefmha::cli
