// One call's problem as the Python layer assembles it: the engine's ProblemBuilder plus the
// Python objects (arrays, DLPack capsules) whose memory the views point at, kept alive as long
// as the handle. Tensors are attached by the engine's own field names ("q", "bwd.d_o",
// "append.k_new"...), so validation messages name the same fields the handle was given.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dlpack_views.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::python {

class ProblemHandle {
 public:
  explicit ProblemHandle(const std::string& family);

  void set_dtype(const std::string& dtype);
  void set_shape(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_q,
                 int64_t seqlen_k, int64_t hdim_q, int64_t hdim_v);
  void set_group(std::vector<int64_t> seqstart_q, std::vector<int64_t> seqstart_k);
  // Group mode over int64 prefix sums already on the device (their data pointers); the caller
  // gives batch and the longest lengths, which nothing on the host can read without a copy.
  void set_group_on_device(uintptr_t seqstart_q, uintptr_t seqstart_k, int64_t batch,
                           int64_t max_seqlen_q, int64_t max_seqlen_k);
  void set_key_lengths(std::vector<int64_t> seqlen_k_per_batch);
  // Mask, scale, soft cap, dropout and split count: the tuple of features.hpp, which the
  // PyTorch fast path (GpuSession::forward) reads the same way.
  void set_features(const pybind11::tuple& features);
  void set_block_table(const std::string& layout, int64_t page_size, int64_t num_pages,
                       std::vector<int32_t> block_table, int64_t max_pages_per_seq);
  void set_page_list(const std::string& layout, int64_t page_size, int64_t num_pages,
                     std::vector<int64_t> page_indptr, std::vector<int32_t> page_indices);
  // Page tables and key lengths already on the device (data pointers of int32 page ids, int64
  // offsets and int64 key counts): read by the kernels only, so a run neither copies nor
  // synchronizes; max_seqlen_k is the longest key count, which the host cannot read.
  void set_block_table_on_device(const std::string& layout, int64_t page_size, int64_t num_pages,
                                 uintptr_t block_table, int64_t max_pages_per_seq);
  void set_page_list_on_device(const std::string& layout, int64_t page_size, int64_t num_pages,
                               uintptr_t page_indptr, uintptr_t page_indices);
  void set_key_lengths_on_device(uintptr_t seqlen_k_per_batch, int64_t max_seqlen_k);
  void set_checked_indices(bool checked) { builder_.checked_device_indices(checked); }
  void set_append(int64_t seqlen_knew, const std::string& rope, int64_t rotary_dim, bool rotate_q);
  // append.rope_theta (0: tables) and append.rope_position_offsets (empty: none).
  void set_rope_base(double theta, std::vector<int64_t> position_offsets);
  // append's RoPE position offsets in device memory (int64, batch entries).
  void set_rope_offsets_on_device(uintptr_t position_offsets);
  void set_deterministic(bool deterministic);
  // fp8 inputs: the descale kind ("per_tensor", "per_block", "per_page") and the per-tensor
  // factors (per_page: q_descale is Q's). The block and page views attach as "fp8.q_block",
  // "fp8.k_block", "fp8.v_block", "fp8.k_page", "fp8.v_page".
  void set_fp8(const std::string& kind, double q_descale, double k_descale, double v_descale);
  // O's dtype; set_dtype resets it (to bf16 for fp8 inputs, else to the input dtype), so call
  // this after set_dtype.
  void set_out_dtype(const std::string& dtype);

  // Each attach takes `as_dtype`: empty, or an fp8 dtype name ("fp8_e4m3", "fp8_e5m2") that
  // uint8 storage is read as (fp8 codes in a NumPy uint8 array, which has no fp8 type); storage
  // of another dtype must then already be that fp8 dtype.

  // A NumPy array as the view of `field`; `writable` for outputs and caches updated in place.
  void attach_host(const std::string& field, const pybind11::array& array, bool writable,
                   const std::string& as_dtype);
  // A DLPack capsule (from `__dlpack__`) as a device view of `field`; all device tensors of one
  // problem must share a device.
  void attach_device(const std::string& field, const pybind11::capsule& capsule, bool writable,
                     const std::string& as_dtype);
  // A PyTorch CUDA tensor described by its data pointer, dtype name, sizes, element strides and
  // device index (dlpack_views.hpp); `owner` is the tensor, kept alive with the problem.
  void attach_torch(const std::string& field, uintptr_t data, const std::string& dtype,
                    const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                    int device, const pybind11::object& owner, const std::string& as_dtype);

  // The device ordinal of the attached device tensors (none when all are host arrays).
  std::optional<int> device() const { return device_; }
  // The problem as attached so far (validation happens when it runs).
  const Problem& problem() const { return builder_.peek(); }
  std::string describe() const { return builder_.peek().describe(); }

  // The CPU reference for the handle's family (backward: all three stages, with the fp32
  // scratch D and dQ accumulator allocated here). Releases the GIL while it computes.
  void run_reference();

 private:
  void attach_device_view(const std::string& field, DeviceTensor tensor,
                          const pybind11::object& owner, const std::string& as_dtype);

  ProblemBuilder builder_;
  std::vector<pybind11::object> owners_;  // what the attached views point into
  std::optional<int> device_;
};

}  // namespace tilefmha::python
