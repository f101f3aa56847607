#include "bench_runner.hpp"

#include <algorithm>
#include <cstddef>
#include <unordered_map>

#include "codegen/generate.hpp"
#include "jit/build_pipeline.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/kernel_cache.hpp"
#include "jit/module.hpp"
#include "jit/target_arch.hpp"
#include "runtime/device_info.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/heuristics.hpp"
#include "runtime/kernel_selection.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/error.hpp"
#include "uniform_fill.hpp"

namespace tilefmha::cli {
namespace {

// Host cost measurements: enough calls for a stable median, few enough that queued launches
// never fill the driver's launch queue.
constexpr int kPlanWarmup = 10;
constexpr int kPlanRepeat = 200;
constexpr int kRunWarmup = 2;  // the first run also loads the kernel's module
constexpr int kRunRepeat = 20;

// Inputs shared by every shape: the FA3 protocol keeps tokens x hidden fixed, so one buffer
// per tensor, filled once, serves each shape through a differently shaped view.
struct HostInputs {
  DType dtype = DType::bf16;
  int64_t elements = 0;
  std::vector<std::byte> q, k, v, o;
  std::vector<std::byte> lse;  // fp32
};

// FP8 shapes hold codes in [-64, 64] (the range of tests/fwd_sm90_fp8_gpu_test.cpp) with
// per-tensor descales near 1/64, so the dequantized inputs land near [-1, 1] like the 16-bit
// shapes' and the softmax does the same work. The descales differ, so --verify catches one
// applied to the wrong operand.
constexpr double kFp8CodeRange = 64.0;

Fp8Scales bench_fp8_scales() {
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  scales.q_descale = 1.0 / 48;
  scales.k_descale = 1.0 / 80;
  scales.v_descale = 1.0 / 64;
  return scales;
}

int64_t qkv_elements(const BenchShape& shape) {
  return shape.batch * shape.seqlen * shape.nhead * shape.hdim;
}

Problem host_problem(const BenchShape& shape, bool lse, HostInputs& in) {
  const DType out = default_out_dtype(shape.dtype);
  ProblemBuilder builder(Family::fwd);
  builder.dtype(shape.dtype)
      .shape(shape.batch, shape.nhead, shape.nhead, shape.seqlen, shape.seqlen, shape.hdim,
             shape.hdim)
      .q(bshd(in.q.data(), shape.dtype, shape.batch, shape.seqlen, shape.nhead, shape.hdim))
      .k(bshd(in.k.data(), shape.dtype, shape.batch, shape.seqlen, shape.nhead, shape.hdim))
      .v(bshd(in.v.data(), shape.dtype, shape.batch, shape.seqlen, shape.nhead, shape.hdim))
      .o(bshd(in.o.data(), out, shape.batch, shape.seqlen, shape.nhead, shape.hdim));
  if (is_fp8(shape.dtype)) builder.fp8_scales(bench_fp8_scales());
  if (shape.causal) builder.causal();
  if (lse)
    builder.lse(
        contiguous_view(in.lse.data(), DType::fp32, {shape.batch, shape.nhead, shape.seqlen}));
  return builder.build();
}

int attribute_mhz(int (jit::GpuContext::*query)() const, const jit::GpuContext& context) {
  try {
    return (context.*query)() / 1000;
  } catch (const Error&) {
    return 0;  // clocks are informative; a driver without the attribute still benchmarks
  }
}

}  // namespace

struct BenchSession::State {
  BenchOptions options;
  std::unique_ptr<jit::GpuContext> context;
  DeviceFacts device;
  CandidateCounts counts;
  std::filesystem::path cache_dir;  // the engine's disk cache, which prepare() fills
  std::unique_ptr<Engine> engine;
  std::unique_ptr<jit::Stream> stream;
  std::unique_ptr<runtime::L2Flusher> flusher;
  std::unordered_map<std::string, KernelBuild> builds;    // by kernel name
  std::unordered_map<std::string, std::string> failures;  // by kernel name: the build error
  std::unordered_map<std::string, std::string> chosen;    // shape label -> kernel name
  HostInputs inputs;
};

BenchSession::BenchSession(const BenchOptions& options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = options;
  if (const std::string why = jit::gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorKind::runtime, "bench needs a GPU: " + why);
  s.context = std::make_unique<jit::GpuContext>();
  const runtime::DeviceInfo info = runtime::query_current_device();
  s.device.card = info.name;
  s.device.arch = info.arch;
  s.device.sm_count = info.sm_count;
  s.device.driver_version = jit::cuda_driver().driver_version;
  s.device.sm_clock_mhz = attribute_mhz(&jit::GpuContext::clock_rate_khz, *s.context);
  s.device.memory_clock_mhz = attribute_mhz(&jit::GpuContext::memory_clock_rate_khz, *s.context);

  runtime::KernelSelection selection;
  selection.config = "fwd";
  selection.arch = info.arch;
  selection.profile = options.profile;
  selection.filters = options.filters;
  selection.filter_files = options.filter_files;
  const runtime::SelectedKernels kernels = runtime::select_kernels(selection);
  s.counts.enumerated = kernels.enumerated;
  s.counts.implemented = static_cast<int64_t>(kernels.supported.size());

  // The engine plans over exactly the selected kernels, as a program shipping that set would.
  s.cache_dir = options.cache_dir.empty() ? jit::KernelCache::default_directory()
                                          : std::filesystem::path(options.cache_dir);
  EngineOptions engine;
  engine.kernels = kernels.supported;
  engine.only_listed = true;
  engine.cache_dir = s.cache_dir.string();
  s.engine = std::make_unique<Engine>(std::move(engine));
  s.stream = std::make_unique<jit::Stream>();
  if (options.timing.l2_flush) s.flusher = std::make_unique<runtime::L2Flusher>();
}

BenchSession::~BenchSession() = default;

const DeviceFacts& BenchSession::device() const {
  return state_->device;
}

const CandidateCounts& BenchSession::candidates() const {
  return state_->counts;
}

double BenchSession::prepare(const std::vector<BenchShape>& shapes) {
  State& s = *state_;
  if (shapes.empty()) return 0;
  HostInputs& in = s.inputs;
  in.dtype = shapes.front().dtype;
  int64_t lse_elements = 1;
  for (const BenchShape& shape : shapes) {
    if (shape.dtype != in.dtype)
      throw Error(ErrorKind::invalid_argument, "bench shapes must share one dtype");
    in.elements = std::max(in.elements, qkv_elements(shape));
    lse_elements = std::max(lse_elements, shape.batch * shape.nhead * shape.seqlen);
  }
  const uint64_t seed = s.options.input_seed;
  const double range = is_fp8(in.dtype) ? kFp8CodeRange : 1.0;
  fill_uniform(in.q, in.dtype, in.elements, seed * 3 + 0, range);
  fill_uniform(in.k, in.dtype, in.elements, seed * 3 + 1, range);
  fill_uniform(in.v, in.dtype, in.elements, seed * 3 + 2, range);
  in.o.assign(static_cast<size_t>(in.elements * dtype_size(default_out_dtype(in.dtype))),
              std::byte{0});
  in.lse.assign(static_cast<size_t>(lse_elements * 4), std::byte{0});

  // The engine's choice per shape (Engine::verdicts: no compiling), in the launch form its plan
  // derives; each distinct kernel is then built once, in parallel, into the engine's disk cache
  // with the options the engine compiles with, so its first plan of the shape only loads it.
  std::vector<KernelConfig> to_build;
  std::vector<jit::BuildJob> jobs;
  for (const BenchShape& shape : shapes) {
    const Problem problem = host_problem(shape, s.options.lse, in);
    const auto verdicts = s.engine->verdicts(problem);
    if (verdicts.empty() || !verdicts.front().rejection.empty()) continue;
    const KernelConfig kernel = runtime::launch_form(verdicts.front().kernel, problem);
    s.chosen[shape.label()] = kernel.name();
    if (s.builds.contains(kernel.name()) ||
        std::any_of(to_build.begin(), to_build.end(), [&](const auto& c) { return c == kernel; }))
      continue;
    to_build.push_back(kernel);
    jobs.push_back({kernel.symbol(), codegen::generate_source(kernel)});
  }
  jit::BuildOptions build;
  build.compile.arch = jit::nvrtc_target(s.device.arch);
  build.workers = s.options.workers;
  build.show_progress = !s.options.no_progress;
  const jit::KernelCache cache(s.cache_dir);
  const jit::BuildReport report = jit::build_kernels(jobs, build, &cache);
  for (size_t i = 0; i < to_build.size(); ++i) {
    const jit::BuildResult& result = report.results[i];
    if (!result.ok) {
      s.failures[to_build[i].name()] = result.error;
      continue;
    }
    s.builds[to_build[i].name()] = {result.compile_seconds, jit::to_string(result.cache)};
  }
  return report.summary.seconds;
}

BenchRow BenchSession::run(const BenchShape& shape, const BenchSweep& sweep) {
  State& s = *state_;
  BenchRow row;
  row.shape = shape;
  row.anchor = sweep.anchor(shape.hdim, shape.seqlen, shape.causal, shape.dtype);
  try {
    const Problem host = host_problem(shape, s.options.lse, s.inputs);
    if (const auto chosen = s.chosen.find(shape.label()); chosen != s.chosen.end()) {
      if (const auto failed = s.failures.find(chosen->second); failed != s.failures.end()) {
        row.status = "error";
        row.message = "kernel " + chosen->second + " failed to build:\n" + failed->second;
        return row;
      }
    }
    const jit::CUstream stream = s.stream->handle();
    {
      const runtime::DeviceMirror mirror(host);
      // The mirror's memsets run on the legacy stream, which the bench stream does not wait
      // for.
      s.context->synchronize();
      const Problem& problem = mirror.device_problem();
      EnginePlan plan;
      try {
        plan = s.engine->plan(problem);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::no_kernel) throw;
        row.status = "no_kernel";
        row.message = e.what();
        return row;
      }
      row.kernel = plan.kernels().front();
      if (const auto built = s.builds.find(row.kernel->name()); built != s.builds.end())
        row.build = built->second;
      row.plan_cached_us =
          runtime::time_on_host([&] { s.engine->plan(problem); }, kPlanWarmup, kPlanRepeat).median;
      const auto launch = [&](jit::CUstream on) { s.engine->run(plan, problem, on); };
      row.run_host_us =
          runtime::time_on_host([&] { launch(stream); }, kRunWarmup, kRunRepeat).median;
      s.stream->synchronize();
      row.gpu_ms = runtime::time_on_gpu(launch, s.options.timing, stream, s.flusher.get());
      row.tflops = shape.flops() / (row.gpu_ms.median * 1e-3) / 1e12;
    }
    if (s.options.verify) {
      // Fresh device copies: outputs poisoned again, so only this run's writes are compared.
      const runtime::DeviceMirror fresh(host);
      s.context->synchronize();  // the poison is written before the run starts
      const EnginePlan plan = s.engine->plan(fresh.device_problem());
      s.engine->run(plan, fresh.device_problem(), stream);
      s.stream->synchronize();
      fresh.copy_outputs_to(host);
      row.verify = verify_against_reference(host);
    }
  } catch (const Error& e) {
    row.status = "error";
    row.message = e.what();
  }
  return row;
}

}  // namespace tilefmha::cli
