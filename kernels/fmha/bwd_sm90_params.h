// Launch parameters of the sm90_ws backward kernel (bwd_sm90.h): the portable BwdParams plus the
// TMA tensor maps of Q, dO, K and V. Built-in types only, so host code and NVRTC lay it out
// identically; the kernel takes it as `const __grid_constant__` so the maps stay in parameter
// space, where cp.async.bulk.tensor reads them.
#pragma once

#include "fmha/bwd_params.h"
#include "fmha/fwd_sm90_params.h"

namespace tilefmha::fmha {

// 4D maps [dim, seq, head, batch] with 64-element (128-byte) boxes: Q and dO by block_m rows,
// K and V by the CTA's 128 keys.
struct Sm90BwdParams {
  Sm90TensorMap q_map;
  Sm90TensorMap do_map;
  Sm90TensorMap k_map;
  Sm90TensorMap v_map;
  BwdParams base;
};

}  // namespace tilefmha::fmha
