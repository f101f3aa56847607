// Codegen of the Hopper backward kernel, bwd_dq_dk_dv on sm90_ws (kernels/fmha/bwd_sm90.h):
// support check, translation unit, shared memory and launch shape. One CTA per (block of keys,
// KV head, sequence): a producer warpgroup and two consumer warpgroups, which own 64 keys each
// up to hdim 128 and split the columns of 64 shared keys at hdim 256 (fmha/bwd_sm90_shape.h).
#pragma once

#include <cstdint>
#include <string>

#include "fmha/bwd_sm90_shape.h"
#include "jit/module.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::codegen {

// Throws Error(not_supported) naming the first field (and its value) the kernel lacks.
void check_supported_bwd_sm90(const KernelConfig& config);
std::string generate_bwd_sm90_source(const KernelConfig& config);
int threads_per_block_bwd_sm90(const KernelConfig& config);
fmha::Sm90BwdSmemLayout bwd_sm90_layout(const KernelConfig& config);
int64_t shared_bytes_bwd_sm90(const KernelConfig& config);
// One grid dimension over the tiles (sequence, KV head, key block of the longest sequence), key
// block fastest: one CTA per tile, or for `config.persistent` (the launch form where
// bwd_sm90_persistent_grid_pays) a persistent grid of at most one CTA per SM, `sm_count` (0:
// unknown, one CTA per tile), whose CTAs take tiles round-robin (fmha::sm90_bwd_for_each_tile).
// Mirrored pairs: one CTA per pair where tiles are long (the hardware then balances the equal
// pairs), else at most one CTA per SM taking pairs round-robin.
// Throws Error(not_supported) past 2^31 - 1 tiles.
jit::LaunchShape launch_shape_bwd_sm90(const KernelConfig& config, const Problem& problem,
                                       int64_t sm_count);

// Whether the kernel takes turns at each query block's dQ adds (runs deterministic, bit-
// reproducible): in deterministic mode, and in the default mode where the turns measured faster
// than overlapping adds: unmasked, batch mode, one key count, with kBwdTurnsMinKeyBlocks key
// blocks a head or more, and at most kBwdStaggeredMaxKeyBlocks at hdim 64 (2k-8k keys) or
// kBwdTurnsMaxKeyBlocksHdim128 at hdim 128 (2k-4k): the staggered walk. Measured (bf16, H200,
// docs/performance.md "Deterministic v3"): deterministic over default at hdim 64 2k-8k keys
// 1.03-1.12x, hdim 128 2k-4k 1.02-1.08x (one A/B: 4k -1.5%) and 8k 0.98-1.00x; at 1k and below
// 0.92-1.01x; hdim 256 0.86-0.93x everywhere.
bool bwd_sm90_takes_turns(const KernelConfig& config, const Problem& problem);
inline constexpr int64_t kBwdTurnsMinKeyBlocks = 16;
inline constexpr int64_t kBwdTurnsMaxKeyBlocksHdim128 = 32;

// Whether a persistent grid pays for `problem`: every sequence has the same tiles (batch mode,
// one key count: the grid deals them statically), and
//   * deterministic (the problem, or the kernel: bwd_sm90_takes_turns): no mask and at most
//     kBwdStaggeredMaxKeyBlocks key blocks a head, so that a wave holds whole heads and their
//     turns can be staggered (bwd_sm90_staggered_turns); or
//     short tiles (as below) under a mask with at most kBwdDeterministicPairsMaxKeyBlocks key
//     blocks a head, below hdim 256, dealt in mirrored pairs, high key block first, on a
//     cooperative grid;
//   * otherwise: its tiles are short, at most kBwdPersistentMaxVisits query blocks each (over
//     the GQA group), so a CTA's fixed cost (K and V in, dK and dV out, the ring's fill) weighs,
//     or a mask makes the key blocks' work unequal, which mirrored pairs even out
//     (bwd_sm90_mirrored_pairs), where a head has at most kBwdMirroredMaxKeyBlocks key blocks.
bool bwd_sm90_persistent_grid_pays(const KernelConfig& config, const Problem& problem);
// Whether the persistent kernel of `config` deals a head's key blocks in mirrored pairs (n and
// blocks - 1 - n) rather than single tiles round-robin: under a mask
// (fmha::Sm90BwdTraits::kMirroredPairs). Deterministic, the grid is launched cooperatively, at
// most one CTA per SM but at least a head's pairs.
bool bwd_sm90_mirrored_pairs(const KernelConfig& config);
// Measured (bf16, FA3 sweep, docs/performance.md "v11"): hdim 64 at 512-2k keys (4-16 blocks of
// 128 queries) gained 1-11% on an H200, hdim 128 and 256 at 512-1k -0.4% to +4%; persistent
// everywhere, causal rows of 8k-16k lost up to 41% on an H100, as a static deal cannot balance
// their unequal tiles.
inline constexpr int64_t kBwdPersistentMaxVisits = 16;
// Measured (bf16 causal, H100, one lease, docs/performance.md "v14"): mirrored pairs took 2-4%
// off hdim 128 at 16-64 key blocks (2k-8k) and 0-2% off hdim 64 and 256 there, but added 2-3%
// at 128-256 key blocks (hdim 64 16k, hdim 256 8k-16k), where one CTA per tile already balances.
inline constexpr int64_t kBwdMirroredMaxKeyBlocks = 64;
// Whether the persistent kernel of `config` staggers deterministic turns: deterministic and
// unmasked (fmha::Sm90BwdTraits::kStaggerable). Its grid holds whole heads per wave and is
// launched cooperatively (bwd_sm90_staggered_grid), because a staggered turn may wait on any key
// block of its head, which must therefore be resident.
bool bwd_sm90_staggered_turns(const KernelConfig& config);
// Up to this many key blocks a head (hdim 64/128 up to 8k keys, hdim 256 up to 4k), every H100
// and H200 holds a head's key blocks in one wave with room for more heads.
inline constexpr int64_t kBwdStaggeredMaxKeyBlocks = 64;
// Deterministic mirrored pairs: the low key blocks of a head's pairs all start when their high
// partners end, so they reach each query block together and queue for its turns, about a dQ add
// each (docs/backward.md). Measured (bf16 causal, H200, one lease, docs/performance.md
// "Deterministic v2"): against one CTA per tile, hdim 64 at 4 key blocks 145 -> 167 TFLOP/s and at
// 8 key blocks 220 -> 226, hdim 128 within 1%, hdim 256 at 8 key blocks (64 KB dQ adds) 158 ->
// 144, and 16 key blocks (hdim 64 at 2k) 293 -> 251 in an earlier run.
inline constexpr int64_t kBwdDeterministicPairsMaxKeyBlocks = 8;
// CTAs of the staggered grid: whole heads, as many as the SMs hold, at most every tile. Where the
// SMs cannot hold one head (fewer SMs than key blocks), the round-robin persistent grid of fewer
// CTAs than key blocks, which the kernel takes as the sign to keep turns in launch order.
int64_t bwd_sm90_staggered_grid(int64_t tiles, int64_t key_blocks, int64_t sm_count);

// CTAs of the persistent grid for `tiles` tiles of `key_blocks` key blocks each on `sm_count` SMs:
// all tiles where they fit one wave, else the most CTAs up to the SM count with no factor in
// common with the key-block count. A CTA's tiles are then `grid` apart, and so go through every
// key block in turn: with a grid that shares a factor with it (132 SMs, 4 key blocks) a CTA
// would get the same key block every time, and under a causal mask key block 0 has the most
// query blocks.
int64_t bwd_sm90_persistent_grid(int64_t tiles, int64_t key_blocks, int64_t sm_count);

}  // namespace tilefmha::codegen
