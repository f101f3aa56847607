// The GPU backend of the Python package: one tilefmha::Engine per device, kept by the Python
// layer for the life of the process so that repeated calls of one problem shape plan in
// microseconds.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "tilefmha/engine.hpp"

namespace tilefmha::python {

class ProblemHandle;

// Group mode from the Python layer's `seqstarts` tuple: (starts_q, starts_k) as host lists, or
// (device pointer q, device pointer k, batch, max_seqlen_q, max_seqlen_k) for int64 prefix sums
// already on the GPU (read by the kernels only, so a run neither copies nor synchronizes).
void apply_seqstarts(ProblemBuilder& builder, const pybind11::tuple& seqstarts);

class GpuSession {
 public:
  // Opens an engine on `device_ordinal` (its primary context, the one PyTorch's runtime uses).
  // Throws Error(invalid_argument) saying why when no driver or GPU is usable.
  explicit GpuSession(int device_ordinal);

  int device_ordinal() const { return device_ordinal_; }
  std::string device_name() const { return engine_->device_name(); }

  // Plans (JIT-compiling on first use) and launches the handle's problem on `stream` (a
  // CUstream handle as an integer; 0 is the legacy default stream). The forward families and
  // the backward (bwd_dq_dk_dv) run on the GPU; others throw Error(not_supported). Releases the
  // GIL meanwhile. Returns the plan's explanation (one line per stage).
  std::string run(const ProblemHandle& handle, uintptr_t stream);

  // The plan's explanation of the handle's problem, planning it (and JIT-compiling its kernels)
  // when its shape was not planned before, without launching anything.
  std::string plan(const ProblemHandle& handle);

  // The forward's fast path for PyTorch CUDA tensors: one crossing into the extension per call.
  // q, k, v: the caller's tensors, [batch, seq, head, dim], or packed [tokens, head, dim] when
  // `seqstarts` is a pair of prefix-sum lists (group mode); o, lse: the outputs the caller
  // allocated ([.., hdim_v] like q, and lse [batch, nhead_q, seqlen_q] or [nhead_q, total_q];
  // lse may be None); `features`: the tuple of features.hpp; `seqstarts`: None, or the tuple of
  // apply_seqstarts. Builds the problem, plans it and
  // launches it on `stream` exactly as run() would. Returns false, having done nothing, when a
  // tensor is not a plain PyTorch tensor of this device with a registered dtype and the rank of
  // its role (torch_views.hpp): the caller then takes the general path, whose checks say what
  // is wrong.
  bool forward(const pybind11::handle& q, const pybind11::handle& k, const pybind11::handle& v,
               const pybind11::handle& o, const pybind11::handle& lse,
               const pybind11::tuple& features, const pybind11::handle& seqstarts,
               uintptr_t stream);

 private:
  // Family and device checks, then the engine's plan; the GIL must be released.
  EnginePlan plan_problem(const Problem& problem, std::optional<int> device);

  int device_ordinal_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace tilefmha::python
