// Basic forward attention: fp16 Q, K, V in [batch, seq, head, dim], causal, run by the CPU
// reference and checked against the formula; where a GPU is present the same problem also runs
// through tilefmha::Engine (JIT-compiling a kernel on first use) and is checked against the CPU.
#include <cmath>
#include <cstdio>
#include <memory>

#include "example_support.hpp"
#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
#include "jit/nvrtc_api.hpp"
#include "runtime/device_mirror.hpp"
#include "tilefmha/engine.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;

namespace {

constexpr int64_t kBatch = 2, kHeads = 4, kSeq = 96, kDim = 64;

// Runs `problem` on the GPU and returns the largest |GPU - CPU| of O; the problem's O view
// holds the CPU result and is overwritten by the GPU's.
double gpu_error(const Problem& problem, const examples::HostBuffer& cpu_o) {
  // Device 0 with the `full` profile's kernels for its arch: the engine compiles only the one it
  // picks, and caches the cubin on disk for the next run.
  Engine engine;
  // The example's own device buffers (a program would use its framework's); they live in the
  // device's primary context, which the engine uses too.
  const jit::GpuContext context;
  runtime::DeviceMirror mirror(problem);  // device copies of every tensor, outputs poisoned

  const EnginePlan plan = engine.plan(mirror.device_problem());
  std::printf("GPU %s: %s", engine.device_name().c_str(), plan.explanation().c_str());
  engine.run(plan, mirror.device_problem());  // the legacy default stream
  context.synchronize();
  mirror.copy_outputs_to(problem);

  examples::MaxError error;
  for (int64_t e = 0; e < cpu_o.size(); ++e)
    error.add(numeric::load(problem.o.data, problem.o.dtype, e), cpu_o.at(e));
  return error.value;
}

}  // namespace

int main() {
  examples::BshdBuffers x(DType::fp16, DType::fp16, kBatch, kSeq, kSeq, kHeads, kHeads, kDim);
  x.fill_inputs(1);

  // build() validates shapes, strides and dtypes and throws tilefmha::Error naming the field.
  const Problem problem = ProblemBuilder(Family::fwd)
                              .dtype(DType::fp16)
                              .shape(kBatch, kHeads, kHeads, kSeq, kSeq, kDim, kDim)
                              .causal()
                              .q(x.q.view)
                              .k(x.k.view)
                              .v(x.v.view)
                              .o(x.o.view)
                              .build();
  reference::run(problem);

  // The formula: query i sees keys 0..i (causal, top-left aligned), scale 1/sqrt(d).
  const examples::MaxError cpu = examples::formula_error(x, [](int64_t i) { return i + 1; });
  // fp16 output: half a unit in the last place of values below 1 is about 5e-4.
  bool ok = cpu.report("CPU reference vs formula", 1e-3);

  // The GPU part needs the driver, a GPU and NVRTC (kernels are compiled at run time).
  std::string why = jit::gpu_unavailable_reason();
  if (why.empty()) try {
      jit::nvrtc_api();
    } catch (const Error& error) {
      why = error.what();
    }
  if (!why.empty()) {
    std::printf("GPU part skipped: %s\n", why.c_str());
    return ok ? 0 : 1;
  }
  examples::HostBuffer cpu_o(DType::fp16, {kBatch, kSeq, kHeads, kDim});
  cpu_o.bytes = x.o.bytes;
  examples::MaxError gpu;
  gpu.value = gpu_error(problem, cpu_o);
  // The kernel rounds P to fp16 before P·V: a few fp16 units.
  ok = gpu.report("GPU engine vs CPU reference", 4e-3) && ok;
  return ok ? 0 : 1;
}
