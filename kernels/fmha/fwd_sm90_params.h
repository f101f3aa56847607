// Launch parameters of the sm90_ws forward kernel: the portable FwdParams plus the TMA tensor
// maps of Q, K, V and O. Plain C++ with built-in types only, so host code and NVRTC lay it out
// identically; the kernel takes it as `const __grid_constant__`, which keeps the maps in
// parameter space where cp.async.bulk.tensor can read them.
#pragma once

#include "fmha/fwd_params.h"

namespace tilefmha::fmha {

// Byte-compatible with the driver's CUtensorMap (and tile::TensorMap): 128 opaque bytes,
// 64-byte aligned.
struct alignas(64) Sm90TensorMap {
  unsigned long long opaque[16];
};

// Every map is 4D over [dim, seq, head, batch] (innermost first) with the view's strides; the
// box is 64 elements (one 128-byte swizzle row) by a tile's rows.
struct Sm90FwdParams {
  Sm90TensorMap q_map;  // box {64, block_m}
  Sm90TensorMap k_map;  // box {64, block_n}
  Sm90TensorMap v_map;  // box {64, block_n}
  Sm90TensorMap o_map;  // box {64, 64}: one consumer warpgroup's rows
  FwdParams base;
};

}  // namespace tilefmha::fmha
