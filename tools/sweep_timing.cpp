#include "sweep_timing.hpp"

#include <algorithm>
#include <cstddef>

#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "runtime/device_info.hpp"
#include "runtime/device_mirror.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/error.hpp"
#include "uniform_fill.hpp"

namespace tilefmha::cli {
namespace {

struct HostProblem {
  std::vector<std::byte> q, k, v, o, lse;
  Problem problem;
  double flops = 0;  // 2 * hq * (dq + dv) per visible (query, key) pair, causal counted as half
  double bytes = 0;  // Q, K, V read and O written once
};

// The forward problem of a matrix shape with random inputs; nullopt-like empty reason when it
// can be set up, else why not.
std::string build_host_problem(const bench::MatrixShape& s, HostProblem& h) {
  if (s.family != Family::fwd) return "timing covers the fwd family only";
  if (s.bias != BiasKind::none) return "timing does not set up bias tensors yet";
  const bool group = s.mode() == Mode::group;
  std::vector<int64_t> seqstart{0};
  for (int64_t n : s.varlen) seqstart.push_back(seqstart.back() + n);
  const int64_t batch = group ? 1 : s.batch;
  const int64_t rows_q = group ? seqstart.back() : s.seqlen_q;
  const int64_t rows_k = group ? seqstart.back() : s.seqlen_k;
  const int64_t q_elems = batch * rows_q * s.nhead_q * s.hdim_q;
  const int64_t k_elems = batch * rows_k * s.nhead_k * s.hdim_q;
  const int64_t v_elems = batch * rows_k * s.nhead_k * s.hdim_v;
  const int64_t o_elems = batch * rows_q * s.nhead_q * s.hdim_v;
  fill_uniform(h.q, s.dtype, q_elems, 1);
  fill_uniform(h.k, s.dtype, k_elems, 2);
  fill_uniform(h.v, s.dtype, v_elems, 3);
  h.o.assign(static_cast<size_t>(o_elems * dtype_size(s.out_dtype)), std::byte{0});

  ProblemBuilder builder(Family::fwd);
  builder.dtype(s.dtype).shape(batch, s.nhead_q, s.nhead_k, rows_q, rows_k, s.hdim_q, s.hdim_v);
  if (group) builder.group(seqstart, seqstart);
  builder.q(bshd(h.q.data(), s.dtype, batch, rows_q, s.nhead_q, s.hdim_q))
      .k(bshd(h.k.data(), s.dtype, batch, rows_k, s.nhead_k, s.hdim_q))
      .v(bshd(h.v.data(), s.dtype, batch, rows_k, s.nhead_k, s.hdim_v))
      .o(bshd(h.o.data(), s.out_dtype, batch, rows_q, s.nhead_q, s.hdim_v));
  if (s.mask == MaskKind::causal) builder.causal(MaskAlign::bottom_right);
  if (s.mask == MaskKind::window) builder.window(256, 0, MaskAlign::bottom_right);
  if (s.softcap) builder.softcap(30.0);
  if (s.dropout) builder.dropout(0.1, 7);
  if (s.dtype == DType::fp8_e4m3 || s.dtype == DType::fp8_e5m2) {
    Fp8Scales scales;
    scales.kind = Fp8ScaleKind::per_tensor;
    builder.fp8_scales(scales);
  }
  if (s.lse) {
    h.lse.assign(static_cast<size_t>(batch * s.nhead_q * rows_q * 4), std::byte{0});
    builder.lse(contiguous_view(h.lse.data(), DType::fp32, {batch, s.nhead_q, rows_q}));
  }
  h.problem = builder.build();

  double pairs = 0;
  const std::vector<int64_t> lengths = group ? s.varlen : std::vector<int64_t>(s.batch, 0);
  for (int64_t n : lengths) {
    const double sq = group ? n : s.seqlen_q, sk = group ? n : s.seqlen_k;
    pairs += s.mask == MaskKind::none ? sq * sk : std::max(sq * sk - sq * (sq - 1) / 2, sq);
  }
  h.flops = 2.0 * pairs * static_cast<double>(s.nhead_q * (s.hdim_q + s.hdim_v));
  h.bytes = static_cast<double>((q_elems + k_elems + v_elems) * dtype_size(s.dtype) +
                                o_elems * dtype_size(s.out_dtype));
  return "";
}

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

void SweepTimer::time(const SweepMatch& match, nlohmann::ordered_json& row) {
  State& s = *state_;
  row["card"] = s.device.card;
  row["sm_clock_mhz"] = s.device.sm_clock_mhz;
  row["memory_clock_mhz"] = s.device.memory_clock_mhz;
  row["driver"] = std::to_string(s.device.driver_version / 1000) + "." +
                  std::to_string(s.device.driver_version % 1000 / 10);
  if (match.status != "match" || !match.kernel) return;
  try {
    HostProblem host;
    if (const std::string why = build_host_problem(*match.shape, host); !why.empty()) {
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
    s.context->synchronize();
    const Problem& problem = mirror.device_problem();
    const EnginePlan plan = engine.plan(problem);
    const jit::CUstream stream = s.stream->handle();
    const auto launch = [&](jit::CUstream on) { engine.run(plan, problem, on); };
    const runtime::SampleStats ms = runtime::time_on_gpu(launch, s.timing, stream, s.flusher.get());
    row["median_ms"] = ms.median;
    row["tflops"] = host.flops / (ms.median * 1e-3) / 1e12;
    row["gbps"] = host.bytes / (ms.median * 1e-3) / 1e9;
  } catch (const Error& e) {
    row["status"] = "error";
    row["reason"] = e.what();
  }
}

}  // namespace tilefmha::cli
