#include "gpu_session.hpp"

#include <pybind11/pybind11.h>

#include "problem_handle.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::python {

GpuSession::GpuSession(int device_ordinal)
    : device_ordinal_(device_ordinal), engine_(std::make_unique<Engine>(EngineOptions{
                                           .device = device_ordinal})) {}

std::string GpuSession::run(const ProblemHandle& handle, uintptr_t stream) {
  const Problem& problem = handle.problem();
  if (problem.family != Family::fwd)
    throw Error(ErrorKind::not_supported,
                "the GPU backend runs family fwd only so far (asked for " +
                    std::string(to_string(problem.family)) + "); use backend='cpu'");
  if (handle.device() != device_ordinal_)
    throw Error(ErrorKind::invalid_argument,
                "the tensors are not on cuda:" + std::to_string(device_ordinal_) +
                    ", the device of this GPU session");
  pybind11::gil_scoped_release release;
  // The engine makes its context current on this thread (Python may call from any thread).
  const EnginePlan plan = engine_->plan(problem);
  engine_->run(plan, problem, reinterpret_cast<void*>(stream));
  return plan.explanation();
}

}  // namespace tilefmha::python
