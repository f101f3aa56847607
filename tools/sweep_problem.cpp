#include "sweep_problem.hpp"

#include <algorithm>

namespace tilefmha::cli {
namespace {

// Visible pairs of one sequence, row by row: exact for every mask form (causal, window, sinks,
// either alignment, sq > sk), where a closed form would have to special-case each.
double visible_in_sequence(const MaskSpec& mask, int64_t sq, int64_t sk) {
  if (mask.kind == MaskKind::none) return static_cast<double>(sq) * static_cast<double>(sk);
  const int64_t shift = mask.align == MaskAlign::bottom_right ? sk - sq : 0;
  double pairs = 0;
  for (int64_t i = 0; i < sq; ++i) {
    const int64_t d = i + shift;
    const int64_t lo = mask.window_left < 0 ? 0 : std::max<int64_t>(0, d - mask.window_left);
    const int64_t hi = mask.window_right < 0 ? sk - 1 : std::min(sk - 1, d + mask.window_right);
    if (hi >= lo) pairs += static_cast<double>(hi - lo + 1);
    // Sink tokens below the window stay visible, never past the right bound.
    pairs += static_cast<double>(std::max<int64_t>(0, std::min({mask.sink_tokens, lo, hi + 1})));
  }
  return pairs;
}

}  // namespace

std::string build_host_problem(const bench::MatrixShape& shape, const KernelConfig& kernel,
                               HostProblem& host) {
  switch (shape.family) {
    case Family::fwd: return build_fwd_problem(shape, host);
    case Family::fwd_pagedkv:
    case Family::batch_prefill: return build_paged_problem(shape, kernel, host);
    // fwd_appendkv joins here with its own builder once its GPU kernel lands.
    default:
      return "timing covers the fwd, fwd_pagedkv and batch_prefill families, not " +
             std::string(to_string(shape.family));
  }
}

void apply_shape_features(const bench::MatrixShape& shape, int64_t batch, int64_t rows,
                          ProblemBuilder& builder, HostProblem& host) {
  // The same constants as MatrixShape::to_problem, so the host problem is the matched one.
  if (shape.mask == MaskKind::causal) builder.causal(MaskAlign::bottom_right);
  if (shape.mask == MaskKind::window) builder.window(256, 0, MaskAlign::bottom_right);
  if (shape.softcap) builder.softcap(30.0);
  if (shape.dropout) builder.dropout(0.1, 7);
  if (is_fp8(shape.dtype)) {
    Fp8Scales scales;
    scales.kind = Fp8ScaleKind::per_tensor;
    builder.fp8_scales(scales);
  }
  if (shape.lse) {
    host.lse.assign(static_cast<size_t>(batch * shape.nhead_q * rows * 4), std::byte{0});
    builder.lse(contiguous_view(host.lse.data(), DType::fp32, {batch, shape.nhead_q, rows}));
  }
}

double visible_pairs(const Problem& problem) {
  double pairs = 0;
  for (int64_t b = 0; b < problem.batch; ++b)
    pairs += visible_in_sequence(problem.mask, problem.query_length(b), problem.key_length(b));
  return pairs;
}

double reference_work(const Problem& problem) {
  return visible_pairs(problem) * static_cast<double>(problem.nhead_q) *
         static_cast<double>(problem.hdim_q + problem.hdim_v);
}

}  // namespace tilefmha::cli
