// The memory of one `tilefmha run`: every tensor its stages read or write, the inputs filled
// from --load or at random, and the mapping between tensors and contract files.
#pragma once

#include <string_view>
#include <vector>

#include "run_files.hpp"
#include "run_save.hpp"
#include "run_spec.hpp"

namespace tilefmha::cli {

// Owns the memory behind a view; move-only, since the view points into the bytes.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  // Zeroed memory for `layout` (shape and strides; its data pointer is ignored).
  explicit OwnedTensor(TensorView layout);
  OwnedTensor(OwnedTensor&&) = default;
  OwnedTensor& operator=(OwnedTensor&&) = default;
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;

  const TensorView& view() const { return view_; }

 private:
  std::vector<std::byte> bytes_;
  TensorView view_;
};

struct RunTensors {
  OwnedTensor q, k, v, o, lse;
  OwnedTensor bias, alibi_slopes, sink_logits;
  OwnedTensor q_descale, k_descale, v_descale;    // fp8 per_block scales
  OwnedTensor k_page_descale, v_page_descale;     // fp8 per_page scales [num_pages, nhead_k]
  OwnedTensor o_acc, lse_acc;                     // split-KV partials
  OwnedTensor d_o, dq, dk, dv, dbias, d, dq_acc;  // backward
  OwnedTensor k_new, v_new, rope_cos, rope_sin;   // append-KV
};

struct NamedView {
  std::string_view name;
  TensorView view;
};

// Allocates the run's tensors, fills the inputs (from `input` when given, else random from
// spec.input_seed) and attaches every view to spec.problem. Reads and checks every input file
// before returning, so nothing is computed from a bad directory.
RunTensors prepare_tensors(RunSpec& spec, InputDir* input);

// The files --save writes, each a float32 or integer array of the contract's shape: the run's
// inputs (so the directory reloads to the same problem), taken before the run because
// append-KV updates its caches and Q in place, and its outputs.
NamedArrays saved_inputs(const RunSpec& spec, const RunTensors& tensors);
NamedArrays saved_outputs(const RunSpec& spec, const RunTensors& tensors);

// Outputs whose checksums the summary reports: o, and dq/dk/dv for backward.
std::vector<NamedView> checksum_views(const RunSpec& spec, const RunTensors& tensors);

}  // namespace tilefmha::cli
