#include "gpu_session.hpp"

#include <pybind11/pybind11.h>

#include "jit/cuda_driver.hpp"
#include "jit/kernel_cache.hpp"
#include "problem_handle.hpp"
#include "runtime/candidates.hpp"
#include "runtime/device_info.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::python {

namespace {

std::unique_ptr<jit::GpuContext> open_context(int device_ordinal) {
  if (const std::string why = jit::gpu_unavailable_reason(); !why.empty())
    throw Error(ErrorKind::invalid_argument, "the GPU backend is unavailable: " + why);
  return std::make_unique<jit::GpuContext>(device_ordinal);
}

}  // namespace

GpuSession::GpuSession(int device_ordinal)
    : device_ordinal_(device_ordinal), context_(open_context(device_ordinal)) {
  // The device is read from this session's own context: it need not be device 0.
  const runtime::DeviceInfo device{
      runtime::arch_for_compute_capability(context_->compute_capability()),
      context_->multiprocessor_count(), context_->device_name()};
  runtime::DispatcherOptions options;
  options.candidates = runtime::default_candidates(device.arch, {Family::fwd});
  options.cache = std::make_shared<jit::KernelCache>(jit::KernelCache::default_directory());
  dispatcher_ = std::make_unique<runtime::Dispatcher>(registry_, device, std::move(options));
}

std::string GpuSession::run(const ProblemHandle& handle, uintptr_t stream) {
  const Problem problem = handle.problem();
  if (problem.family != Family::fwd)
    throw Error(ErrorKind::not_supported,
                "the GPU backend runs family fwd only so far (asked for " +
                    std::string(to_string(problem.family)) + "); use backend='cpu'");
  if (handle.device() != device_ordinal_)
    throw Error(ErrorKind::invalid_argument,
                "the tensors are not on cuda:" + std::to_string(device_ordinal_) +
                    ", the device of this GPU session");
  pybind11::gil_scoped_release release;
  // Python threads may call from any OS thread; the context must be current on this one.
  context_->make_current();
  const auto plan = dispatcher_->plan(problem);
  dispatcher_->run(*plan, problem, reinterpret_cast<jit::CUstream>(stream));
  return plan->explanation;
}

}  // namespace tilefmha::python
