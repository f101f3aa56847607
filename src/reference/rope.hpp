// Rotary position embedding of one row, as append-KV applies it to new K and to Q.
#pragma once

#include <cstdint>

#include "tilefmha/problem.hpp"

namespace tilefmha::reference::detail {

// Rotates the first spec.rotary_dim values of `row` for absolute position `position`:
// for f < rotary_dim / 2, with c = rope_cos[position, f] and s = rope_sin[position, f] (or, when
// spec.rope_theta > 0, c = cos(a) and s = sin(a) of a = position * rope_theta^(-2f / rotary_dim)),
//   (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)
// on the pair (2f, 2f + 1) (interleaved) or (f, f + rotary_dim / 2) (half_rotated).
// Values past rotary_dim, and every value under RopeKind::none, are left unchanged.
void apply_rope(const AppendKv& spec, int64_t position, double* row);

}  // namespace tilefmha::reference::detail
