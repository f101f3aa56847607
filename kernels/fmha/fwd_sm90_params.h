// Launch parameters of the sm90_ws forward kernel: the portable FwdParams plus the TMA tensor
// maps of Q, K, V and O. Plain C++ with built-in types only, so host code and NVRTC lay it out
// identically; the kernel takes it as `const __grid_constant__`, which keeps the maps in
// parameter space where cp.async.bulk.tensor can read them.
#pragma once

#include "fmha/fwd_params.h"
#include "tile/fast_divmod.h"

namespace tilefmha::fmha {

// Byte-compatible with the driver's CUtensorMap (and tile::TensorMap): 128 opaque bytes,
// 64-byte aligned.
struct alignas(64) Sm90TensorMap {
  unsigned long long opaque[16];
};

// Every map is 4D over [dim, seq, head, batch] (innermost first) with the view's strides; the
// box is 64 elements (one 128-byte swizzle row) by a tile's rows. With packed GQA, Q and O are
// 5D over [dim, head in group, KV head, seq, batch] with boxes of g heads by tile rows / g.
struct Sm90FwdParams {
  Sm90TensorMap q_map;  // box {64, block_m}
  Sm90TensorMap k_map;  // box {64, block_n}
  Sm90TensorMap v_map;  // box {64, block_n}
  Sm90TensorMap o_map;  // box {64, 64}: one consumer warpgroup's rows
  FwdParams base;
  // The tile scheduler's inputs (fwd_sm90_scheduler.h), computed on the host so the kernel reads
  // them from the parameter bank instead of keeping derived values live across its main loop:
  // query blocks per (sequence, head), ceil(seqlen_q / block_m); whether tiles are numbered in
  // pairs (a grid of fewer CTAs than tiles under a mask that gives query blocks unequal key
  // counts; runtime::bind_sm90_grid sets it for the launch's grid); and numbers per (sequence,
  // head): m_blocks, rounded up to even when paired.
  int m_blocks;
  int paired;
  // The two counts a tile number is divided by, each with its multiply-shift (tile::FastDivisor
  // holds the count itself as `divisor`): numbers per (sequence, head), and the heads the tiles
  // run over: nhead_q, or nhead_k when GQA groups are packed (the Q and O maps are then 5D [dim,
  // group head, KV head, seq, batch] and m_blocks counts block_m / g query positions).
  tile::FastDivisor m_slots;
  tile::FastDivisor tile_heads;
  // Split-KV kernels: the splits per sequence (FwdParams::num_splits), which tile numbers run
  // over after the heads (fwd_sm90_scheduler.h). 1 for the fwd family, whose kernels never read
  // it. Last, so the fields before keep their offsets.
  tile::FastDivisor tile_splits;
  // Paged 16-bit kernels: 1 where the K and V stages are laid out in 8-row groups
  // (fwd_sm90_kv_layout.h), else 0; others never read these. The K and V maps are then 5D with
  // boxes {64, 8, panels, rows / 8, 1}: over an NHD pool [dim in panel, row in group, panel of
  // any head (heads lie side by side), group, page]; over an HND pool (kv_heads_in_pages = the
  // pool's heads) [dim in panel, row in group, panel, group, head of any page]. Last, so the
  // fields before keep their offsets.
  int kv_grouped;
  int kv_heads_in_pages;
};

}  // namespace tilefmha::fmha
