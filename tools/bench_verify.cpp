#include "bench_verify.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "host_buffer.hpp"
#include "runtime/tolerance.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::cli {
namespace {

// Which part of the problem is recomputed: batches [0, batches), heads [0, heads) and query
// rows [row_start, row_start + rows).
struct Slice {
  int64_t batches = 0;
  int64_t heads = 0;
  int64_t row_start = 0;
  int64_t rows = 0;
};

// A [batch, seq, head, dim] view restricted to the slice (same strides, shifted start).
TensorView sliced_rows(TensorView view, const Slice& slice, int64_t heads) {
  view.data = static_cast<std::byte*>(view.data) +
              slice.row_start * view.stride[1] * dtype_size(view.dtype);
  view.shape[0] = slice.batches;
  view.shape[1] = slice.rows;
  view.shape[2] = heads;
  return view;
}

// A [batch, head, seq] LSE view restricted to the slice.
TensorView sliced_lse(TensorView view, const Slice& slice) {
  view.data = static_cast<std::byte*>(view.data) +
              slice.row_start * view.stride[2] * dtype_size(view.dtype);
  view.shape[0] = slice.batches;
  view.shape[1] = slice.heads;
  view.shape[2] = slice.rows;
  return view;
}

// Recomputes one slice and compares it; `bottom_right` re-aligns a causal mask for the last
// rows (local row i' is global row i' + seqlen - rows when seqlen_q == seqlen_k).
void verify_slice(const Problem& host, const Slice& slice, bool bottom_right,
                  runtime::Agreement& o_agreement, runtime::Agreement& lse_agreement) {
  const int64_t group = host.nhead_q / host.nhead_k;
  Problem part = host;
  part.batch = slice.batches;
  part.nhead_q = slice.heads;
  part.nhead_k = std::max<int64_t>(1, slice.heads / group);
  part.seqlen_q = slice.rows;
  if (bottom_right) part.mask.align = MaskAlign::bottom_right;
  part.q = sliced_rows(host.q, slice, part.nhead_q);
  Slice all_keys = slice;
  all_keys.row_start = 0;
  all_keys.rows = host.seqlen_k;
  part.k = sliced_rows(host.k, all_keys, part.nhead_k);
  part.v = sliced_rows(host.v, all_keys, part.nhead_k);
  const TensorView gpu_o = sliced_rows(host.o, slice, part.nhead_q);
  HostBuffer ref_o(gpu_o);
  part.o = ref_o.view;
  const TensorView gpu_lse = host.return_lse ? sliced_lse(host.lse, slice) : TensorView{};
  HostBuffer ref_lse(gpu_lse);
  if (host.return_lse) part.lse = ref_lse.view;
  reference::forward(part);
  // Per problem: fp8 inputs widen both (P rounded to e4m3, narrower score accumulation).
  o_agreement.add(gpu_o, ref_o.view, runtime::o_tolerance(part));
  if (host.return_lse) lse_agreement.add(gpu_lse, ref_lse.view, runtime::lse_tolerance(part));
}

}  // namespace

VerifyResult verify_against_reference(const Problem& host, double work_budget) {
  const bool causal = host.mask.kind == MaskKind::causal;
  const bool fp8_tables =
      host.fp8.kind == Fp8ScaleKind::per_block || host.fp8.kind == Fp8ScaleKind::per_page;
  if (host.family != Family::fwd || host.mode != Mode::batch ||
      (host.mask.kind != MaskKind::none && !causal) ||
      (causal && host.mask.align != MaskAlign::top_left) || fp8_tables)
    throw Error(ErrorKind::invalid_argument,
                "bench verification handles batch-mode fwd problems with no mask or causal "
                "top-left (fp8: per-tensor descales), not " +
                    host.describe());
  const auto start = std::chrono::steady_clock::now();
  const double row_cost =
      static_cast<double>(host.seqlen_k) * static_cast<double>(host.hdim_q + host.hdim_v);
  const int64_t affordable_rows =
      std::max<int64_t>(128, static_cast<int64_t>(work_budget / std::max(row_cost, 1.0)));
  const int64_t group = host.nhead_q / host.nhead_k;

  VerifyResult result;
  runtime::Agreement o, lse;
  if (affordable_rows >= host.batch * host.nhead_q * host.seqlen_q) {
    verify_slice(host, {host.batch, host.nhead_q, 0, host.seqlen_q}, false, o, lse);
    result.scope = "all batches, heads and rows";
  } else if (affordable_rows >= host.seqlen_q * group) {
    // Whole KV groups, so every query head's K/V head is inside the slice.
    const int64_t heads = std::min(host.nhead_q, affordable_rows / host.seqlen_q / group * group);
    verify_slice(host, {1, heads, 0, host.seqlen_q}, false, o, lse);
    result.scope = "batch 0, heads 0-" + std::to_string(heads - 1) + ", all rows";
  } else {
    const int64_t half = std::max<int64_t>(1, std::min(host.seqlen_q, affordable_rows) / 2);
    verify_slice(host, {1, 1, 0, half}, false, o, lse);
    result.scope = "batch 0, head 0, rows 0-" + std::to_string(half - 1);
    // The last rows as their own problem: bottom-right alignment keeps a causal mask exact
    // only when queries and keys have the same length.
    if (host.seqlen_q == host.seqlen_k || !causal) {
      const int64_t tail = std::min(half, host.seqlen_q - half);
      if (tail > 0) {
        verify_slice(host, {1, 1, host.seqlen_q - tail, tail}, causal, o, lse);
        result.scope += " and " + std::to_string(host.seqlen_q - tail) + "-" +
                        std::to_string(host.seqlen_q - 1);
      }
    }
  }
  result.max_abs_error = std::max(o.max_abs_error, lse.max_abs_error);
  result.mismatches = o.mismatches + lse.mismatches;
  result.compared = o.compared + lse.compared;
  result.status = result.mismatches == 0 ? "passed" : "failed";
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace tilefmha::cli
