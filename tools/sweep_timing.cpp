#include "sweep_timing.hpp"

#include <optional>

#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "runtime/device_info.hpp"
#include "runtime/device_mirror.hpp"
#include "sweep_device_indices.hpp"
#include "sweep_problem.hpp"
#include "sweep_validate.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

int attribute_mhz(int (jit::GpuContext::*query)() const, const jit::GpuContext& context) {
  try {
    return (context.*query)() / 1000;
  } catch (const Error&) {
    return 0;  // clocks are informative only
  }
}

}  // namespace

struct SweepTimer::State {
  runtime::TimingOptions timing;
  std::string cache_dir;
  std::unique_ptr<jit::GpuContext> context;
  runtime::DeviceInfo info;
  DeviceFacts device;
  std::unique_ptr<jit::Stream> stream;
  std::unique_ptr<runtime::L2Flusher> flusher;
};

SweepTimer::SweepTimer(runtime::TimingOptions timing, std::string cache_dir)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  runtime::check_timing_options(timing);
  s.timing = timing;
  s.cache_dir = std::move(cache_dir);
  if (const std::string why = jit::gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorKind::runtime,
                "sweep timing needs a GPU (" + why + "); pass --compile-only for the match table");
  s.context = std::make_unique<jit::GpuContext>();
  s.info = runtime::query_current_device();
  s.device.card = s.info.name;
  s.device.arch = s.info.arch;
  s.device.sm_count = s.info.sm_count;
  s.device.driver_version = jit::cuda_driver().driver_version;
  s.device.sm_clock_mhz = attribute_mhz(&jit::GpuContext::clock_rate_khz, *s.context);
  s.device.memory_clock_mhz = attribute_mhz(&jit::GpuContext::memory_clock_rate_khz, *s.context);
  s.stream = std::make_unique<jit::Stream>();
  if (timing.l2_flush) s.flusher = std::make_unique<runtime::L2Flusher>();
}

SweepTimer::~SweepTimer() = default;

const DeviceFacts& SweepTimer::device() const {
  return state_->device;
}

void SweepTimer::time(const SweepMatch& match, nlohmann::ordered_json& row, bool validate) {
  State& s = *state_;
  row["card"] = s.device.card;
  row["sm_clock_mhz"] = s.device.sm_clock_mhz;
  row["memory_clock_mhz"] = s.device.memory_clock_mhz;
  row["driver"] = std::to_string(s.device.driver_version / 1000) + "." +
                  std::to_string(s.device.driver_version % 1000 / 10);
  if (match.status != "match" || !match.kernel) return;
  try {
    HostProblem host;
    if (const std::string why = build_host_problem(*match.shape, *match.kernel, host);
        !why.empty()) {
      row["status"] = "untimed";
      row["reason"] = why;
      return;
    }
    // An engine whose only kernel is this one, so the plan runs exactly it; the build stored
    // its cubin in the cache, so planning only loads it.
    EngineOptions options;
    options.kernels = {*match.kernel};
    options.only_listed = true;
    options.cache_dir = s.cache_dir;
    Engine engine(std::move(options));
    const runtime::DeviceMirror mirror(host.problem);
    // The serving families run as a serving engine calls them, index arrays on the device.
    std::optional<DeviceIndexCopies> indices;
    if (host.problem.is_paged()) indices.emplace(mirror.device_problem());
    s.context->synchronize();
    const Problem& problem = indices ? indices->problem() : mirror.device_problem();
    const EnginePlan plan = engine.plan(problem);
    const jit::CUstream stream = s.stream->handle();
    const auto launch = [&](jit::CUstream on) { engine.run(plan, problem, on); };
    // The run validation reads is the first, into outputs the mirror poisoned: an element the
    // kernel never writes stays NaN and fails.
    launch(stream);
    s.context->synchronize();
    if (validate) mirror.copy_outputs_to(host.problem);
    const runtime::SampleStats ms = runtime::time_on_gpu(launch, s.timing, stream, s.flusher.get());
    row["median_ms"] = ms.median;
    row["tflops"] = host.flops / (ms.median * 1e-3) / 1e12;
    row["gbps"] = host.bytes / (ms.median * 1e-3) / 1e9;
    if (validate) put_validation(validate_row(host.problem), row);
  } catch (const Error& e) {
    row["status"] = "error";
    row["reason"] = e.what();
  }
}

}  // namespace tilefmha::cli
