// The 32-bit limits of the GPU forward kernels, checked when planning (as rejections of the
// kernel templates' can_implement), so that a problem past them is refused with the field at
// fault before anything launches, instead of wrapping an index inside a kernel.
#pragma once

#include <cstdint>
#include <optional>

#include "templates/rejection.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::templates {

// Sequence lengths are `int` in the kernels (kernels/fmha/seq_info.h, fwd_sm80.h, the masks),
// and the masks clamp window offsets to +-2^30 as "beyond any index" (kernels/fmha/mask.h,
// fwd_sm90_mask.h): every per-sequence length must stay below 2^30.
inline constexpr int64_t kMaxKernelSeqLen = int64_t{1} << 30;

// TMA takes int32 coordinates; in group mode the seq coordinate is a row of the packed view
// (seqstart + row), so the Q/O and K/V views must have fewer than 2^31 rows.
inline constexpr int64_t kMaxTmaRows = int64_t{1} << 31;

// seqlen_q and seqlen_k (the longest sequences; in group mode the caller's maxima) below
// kMaxKernelSeqLen. Every forward kernel (sm80_mma, sm90_ws, simt_f32).
std::optional<Rejection> check_sequence_lengths(const Problem& problem);

// sm90_ws: group-mode view rows below kMaxTmaRows, and the scheduler's tile count of the
// launched config at most codegen::kSm90MaxTiles.
std::optional<Rejection> check_sm90_limits(const KernelConfig& config, const Problem& problem);

// What no GPU backward kernel handles yet, named by field (sequence lengths, paged caches,
// device-side index arrays); the traits the kernels carry are matched by their configs.
std::optional<Rejection> check_backward_problem(const Problem& problem);

}  // namespace tilefmha::templates
