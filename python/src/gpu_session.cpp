#include "gpu_session.hpp"

#include <pybind11/stl.h>

#include <optional>
#include <utility>
#include <vector>

#include "features.hpp"
#include "problem_handle.hpp"
#include "tilefmha/error.hpp"
#include "torch_views.hpp"

namespace tilefmha::python {
namespace py = pybind11;

namespace {

// A packed [tokens, head, dim] view as the engine's group-mode [1, tokens, head, dim] (what
// x[None] gives in Python).
TensorView with_unit_batch(TensorView view) {
  for (int d = view.rank; d > 0; --d) {
    view.shape[d] = view.shape[d - 1];
    view.stride[d] = view.stride[d - 1];
  }
  view.shape[0] = 1;
  view.stride[0] = view.shape[1] * view.stride[1];
  ++view.rank;
  return view;
}

}  // namespace

void apply_seqstarts(ProblemBuilder& builder, const py::tuple& seqstarts) {
  if (seqstarts.size() == 2) {
    builder.group(py::cast<std::vector<int64_t>>(seqstarts[0]),
                  py::cast<std::vector<int64_t>>(seqstarts[1]));
    return;
  }
  if (seqstarts.size() != 5)
    throw Error(ErrorKind::invalid_argument,
                "seqstarts: expected (starts_q, starts_k) lists or (device pointer q, device "
                "pointer k, batch, max_seqlen_q, max_seqlen_k), got " +
                    std::to_string(seqstarts.size()) + " values");
  const auto pointer = [&](int i) {
    return reinterpret_cast<const int64_t*>(py::cast<uintptr_t>(seqstarts[i]));
  };
  builder.group_on_device(pointer(0), pointer(1), py::cast<int64_t>(seqstarts[2]),
                          py::cast<int64_t>(seqstarts[3]), py::cast<int64_t>(seqstarts[4]));
}

GpuSession::GpuSession(int device_ordinal)
    : device_ordinal_(device_ordinal),
      engine_(std::make_unique<Engine>(EngineOptions{.device = device_ordinal})) {}

EnginePlan GpuSession::plan_problem(const Problem& problem, std::optional<int> device) {
  const Family f = problem.family;
  // bwd_dq_dk_dv is the whole backward (its plan runs the three backward stages).
  const bool on_gpu = f == Family::fwd || f == Family::fwd_splitkv ||
                      f == Family::fwd_splitkv_combine || f == Family::fwd_pagedkv ||
                      f == Family::batch_prefill || f == Family::fwd_appendkv ||
                      f == Family::bwd_dq_dk_dv;
  if (!on_gpu)
    throw Error(ErrorKind::not_supported,
                "the GPU backend runs the forward families (fwd, fwd_splitkv, "
                "fwd_splitkv_combine, fwd_pagedkv, batch_prefill, fwd_appendkv) and the backward "
                "(bwd_dq_dk_dv) so far (asked for " +
                    std::string(to_string(f)) + "); use backend='cpu'");
  if (device != device_ordinal_)
    throw Error(ErrorKind::invalid_argument,
                "the tensors are not on cuda:" + std::to_string(device_ordinal_) +
                    ", the device of this GPU session");
  // The engine makes its context current on this thread (Python may call from any thread).
  return engine_->plan(problem);
}

std::string GpuSession::run(const ProblemHandle& handle, uintptr_t stream) {
  const Problem& problem = handle.problem();
  py::gil_scoped_release release;
  const EnginePlan plan = plan_problem(problem, handle.device());
  engine_->run(plan, problem, reinterpret_cast<void*>(stream));
  return plan.explanation();
}

std::string GpuSession::plan(const ProblemHandle& handle) {
  py::gil_scoped_release release;
  return plan_problem(handle.problem(), handle.device()).explanation();
}

bool GpuSession::forward(const py::handle& q, const py::handle& k, const py::handle& v,
                         const py::handle& o, const py::handle& lse, const py::tuple& features,
                         const py::handle& seqstarts, uintptr_t stream) {
  const bool group = !seqstarts.is_none();
  const int rank = group ? 3 : 4;
  const int device = device_ordinal_;
  std::optional<TensorView> views[] = {torch_view(q, rank, device), torch_view(k, rank, device),
                                       torch_view(v, rank, device), torch_view(o, rank, device),
                                       std::nullopt};
  if (!lse.is_none()) views[4] = torch_view(lse, rank - 1, device);
  for (int i = 0; i < 4; ++i)
    if (!views[i]) return false;
  if (!lse.is_none() && !views[4]) return false;
  if (group)
    for (auto& view : views)
      if (view) view = with_unit_batch(*view);
  const TensorView &qv = *views[0], &kv = *views[1], &vv = *views[2];

  ProblemBuilder builder(Family::fwd);
  builder.dtype(qv.dtype);
  // The engine's view conventions: q [batch, seqlen_q, nhead_q, hdim_q], k [.., seqlen_k,
  // nhead_k, hdim_q], v [.., hdim_v]; group mode derives batch and the lengths from seqstarts.
  builder.shape(qv.shape[0], qv.shape[2], kv.shape[2], qv.shape[1], kv.shape[1], qv.shape[3],
                vv.shape[3]);
  if (group) apply_seqstarts(builder, py::reinterpret_borrow<py::tuple>(seqstarts));
  apply(builder, read_scalar_features(features));
  builder.q(qv).k(kv).v(vv).o(*views[3]);
  if (views[4]) builder.lse(*views[4]);
  const Problem& problem = builder.peek();

  py::gil_scoped_release release;
  const EnginePlan plan = plan_problem(problem, device);
  engine_->run(plan, problem, reinterpret_cast<void*>(stream));
  return true;
}

}  // namespace tilefmha::python
