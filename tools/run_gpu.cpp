#include "run_gpu.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>

#include "core/numeric.hpp"
#include "core/tensor_iteration.hpp"
#include "host_buffer.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "runtime/device_mirror.hpp"
#include "runtime/tolerance.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::cli {
namespace {

std::string agreement_line(const char* name, const runtime::Agreement& a, runtime::Tolerance t) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "%s: max abs err %.3g, max rel err %.3g, %lld of %lld outside atol %.3g + rtol "
                "%.3g*|ref|",
                name, a.max_abs_error, a.max_rel_error, static_cast<long long>(a.mismatches),
                static_cast<long long>(a.compared), t.atol, t.rtol);
  return line;
}

void tally(Validation& validation, const runtime::Agreement& agreement) {
  validation.passed = validation.passed && agreement.mismatches == 0;
  validation.max_abs_error = std::max(validation.max_abs_error, agreement.max_abs_error);
  validation.mismatches += agreement.mismatches;
  validation.compared += agreement.compared;
}

}  // namespace

GpuRun run_on_gpu(const std::vector<Problem>& stages, std::optional<Pipeline> pipeline) {
  for (const Problem& stage : stages) {
    const Family f = stage.family;
    // bwd_dq_dk_dv is the whole backward (the engine plans its three stages).
    if (f != Family::fwd && f != Family::fwd_pagedkv && f != Family::batch_prefill &&
        f != Family::fwd_appendkv && f != Family::bwd_dq_dk_dv)
      throw Error(ErrorKind::not_supported,
                  "--backend gpu runs families fwd, fwd_pagedkv, batch_prefill, fwd_appendkv and "
                  "the backward "
                  "so far (asked for " +
                      std::string(to_string(f)) + "); use --backend cpu");
  }
  if (const std::string why = jit::gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorKind::invalid_argument, "--backend gpu: " + why);

  EngineOptions options;
  options.pipeline = pipeline;
  Engine engine(options);
  // The device copies need the engine's (primary) context current; it also synchronizes.
  const jit::GpuContext context;

  GpuRun result;
  result.device_name = engine.device_name();
  for (const Problem& stage : stages) {
    auto mirror = std::make_unique<runtime::DeviceMirror>(stage);
    const EnginePlan plan = engine.plan(mirror->device_problem());
    result.explanation += plan.explanation();
    engine.run(plan, mirror->device_problem());  // first run: module load
    context.synchronize();
    // Append-KV rotates Q in place: the timed run starts again from the host inputs.
    const bool writes_inputs = stage.family == Family::fwd_appendkv;
    if (writes_inputs) mirror = std::make_unique<runtime::DeviceMirror>(stage);
    const auto start = std::chrono::steady_clock::now();
    engine.run(plan, mirror->device_problem());
    context.synchronize();
    result.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    mirror->copy_outputs_to(stage);
    if (writes_inputs) {
      const Problem& device = mirror->device_problem();
      result.written_inputs.push_back({"k", mirror->download(device.k)});
      result.written_inputs.push_back({"v", mirror->download(device.v)});
      if (stage.append.rotate_q) result.written_inputs.push_back({"q", mirror->download(device.q)});
      if (quantizes_append(stage)) {
        result.written_inputs.push_back({"k_page", mirror->download(device.fp8.k_page)});
        result.written_inputs.push_back({"v_page", mirror->download(device.fp8.v_page)});
      }
    }
  }
  return result;
}

namespace {

// The host view an append stage's written input of this name mirrors.
const TensorView& written_view(const Problem& stage, const std::string& name) {
  if (name == "k") return stage.k;
  if (name == "v") return stage.v;
  if (name == "k_page") return stage.fp8.k_page;
  if (name == "v_page") return stage.fp8.v_page;
  return stage.q;
}

}  // namespace

void keep_written_inputs(const std::vector<Problem>& stages, const GpuRun& gpu) {
  for (const Problem& stage : stages) {
    if (stage.family != Family::fwd_appendkv) continue;
    for (const GpuRun::WrittenInput& input : gpu.written_inputs) {
      const TensorView& host = written_view(stage, input.name);
      // The device buffer mirrors the host view's whole extent, padding included.
      const size_t bytes = std::min(input.written.bytes.size(),
                                    static_cast<size_t>(host.extent() * dtype_size(host.dtype)));
      std::memcpy(host.data, input.written.bytes.data(), bytes);
    }
  }
}

namespace {

// Tolerance of an appended cache, Q or page scales: a quantizing append's codes may be one
// fp8 step from the reference's (the kernel multiplies by the scale's fp32 reciprocal, the
// reference divides in double: at most 2^-3 relative for e4m3, 2^-2 for e5m2, beside the
// subnormals' absolute step), its scales agree within float rounding of the largest value;
// other appends as their dtype's outputs.
runtime::Tolerance written_tolerance(const Problem& stage, const std::string& name) {
  if (!quantizes_append(stage)) return runtime::output_tolerance(stage.dtype);
  if (name == "k_page" || name == "v_page") return {0.0, 1e-5};
  const double step = stage.dtype == DType::fp8_e5m2 ? 0x1p-2 : 0x1p-3;
  return {step * 0x1p-6, step};
}

}  // namespace

// dQ, dK and dV of a backward stage against reference::backward into separate buffers.
void validate_backward(const Problem& stage, Validation& validation) {
  Problem on_cpu = stage;
  HostBuffer dq(stage.bwd.dq), dk(stage.bwd.dk), dv(stage.bwd.dv), d(stage.bwd.d),
      dq_acc(stage.bwd.dq_acc), dbias(stage.bwd.dbias);
  on_cpu.bwd.dq = dq.view;
  on_cpu.bwd.dk = dk.view;
  on_cpu.bwd.dv = dv.view;
  on_cpu.bwd.d = d.view;
  on_cpu.bwd.dq_acc = dq_acc.view;
  on_cpu.bwd.dbias = dbias.view;
  reference::backward(on_cpu);
  for (const auto& [name, gpu, ref] :
       {std::tuple{"dq", &stage.bwd.dq, &dq.view}, std::tuple{"dk", &stage.bwd.dk, &dk.view},
        std::tuple{"dv", &stage.bwd.dv, &dv.view}}) {
    double magnitude = 0;  // the reference's largest gradient sets the bound
    for_each_element(*ref, [&](int64_t, int64_t offset) {
      magnitude = std::max(magnitude, std::fabs(numeric::load(ref->data, ref->dtype, offset)));
    });
    const runtime::Tolerance tolerance = runtime::gradient_tolerance(stage.out_dtype, magnitude);
    runtime::Agreement agreement;
    agreement.add(*gpu, *ref, tolerance);
    validation.passed = validation.passed && agreement.mismatches == 0;
    validation.report += agreement_line(name, agreement, tolerance) + "\n";
  }
}

Validation validate_against_reference(const std::vector<Problem>& stages, const GpuRun& gpu) {
  Validation validation;
  for (const Problem& stage : stages) {
    if (stage.is_backward()) {
      validate_backward(stage, validation);
      continue;
    }
    Problem on_cpu = stage;
    HostBuffer o(stage.o), lse(stage.lse);
    on_cpu.o = o.view;
    on_cpu.lse = lse.view;
    reference::run(on_cpu);
    if (stage.family == Family::fwd_appendkv) {
      for (const GpuRun::WrittenInput& input : gpu.written_inputs) {
        const TensorView& expected = written_view(stage, input.name);
        const runtime::Tolerance tolerance = written_tolerance(stage, input.name);
        runtime::Agreement agreement;
        agreement.add(input.written.view, expected, tolerance);
        validation.passed = validation.passed && agreement.mismatches == 0;
        validation.report += agreement_line(input.name.c_str(), agreement, tolerance) + "\n";
      }
    }
    if (stage.o.empty()) continue;  // a quantizing append attends to nothing
    // FP8 inputs widen both: the kernel rounds P to e4m3 and accumulates scores in fewer bits.
    const runtime::Tolerance o_tolerance = runtime::o_tolerance(stage);
    runtime::Agreement o_agreement;
    o_agreement.add(stage.o, o.view, o_tolerance);
    validation.report += agreement_line("o", o_agreement, o_tolerance) + "\n";
    tally(validation, o_agreement);
    if (!stage.lse.empty()) {
      const runtime::Tolerance lse_tolerance = runtime::lse_tolerance(stage);
      runtime::Agreement lse_agreement;
      lse_agreement.add(stage.lse, lse.view, lse_tolerance);
      validation.report += agreement_line("lse", lse_agreement, lse_tolerance) + "\n";
      tally(validation, lse_agreement);
    }
  }
  return validation;
}

}  // namespace tilefmha::cli
