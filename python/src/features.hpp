// The scalar attention features of one call (mask, scale, soft cap, dropout, split count), as
// the Python layer hands them over: one tuple built by tilefmha._features.scalar_features. The
// general path (ProblemHandle::set_features) and the PyTorch fast path (GpuSession::forward)
// both read it here and apply it to their ProblemBuilder here, so the two cannot drift apart.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>

#include "tilefmha/problem.hpp"

namespace tilefmha::python {

struct ScalarFeatures {
  MaskKind mask = MaskKind::none;
  MaskAlign align = MaskAlign::top_left;
  int64_t window_left = -1;
  int64_t window_right = -1;
  int64_t sink_tokens = 0;
  std::optional<double> scale;  // none: 1 / sqrt(hdim_q)
  double softcap = 0.0;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
  int64_t num_splits = 0;   // 0: the engine chooses; 1: one pass; n > 1: n splits
  bool accumulate = false;  // Problem::accumulate: merge into the state O and LSE hold
};

// Reads (mask kind, mask align, window_left, window_right, sink_tokens, scale or None, softcap,
// dropout_p, seed, offset, num_splits, accumulate). Enum names are the engine's ("causal",
// "top_left"...). Throws Error(invalid_argument) for a tuple of another length or an unknown enum
// name.
ScalarFeatures read_scalar_features(const pybind11::tuple& values);

// Sets the features on `builder`; the engine validates them when the problem is planned or run.
void apply(ProblemBuilder& builder, const ScalarFeatures& features);

}  // namespace tilefmha::python
