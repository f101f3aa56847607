// The fp8 V transpose. FP8 wgmma reads its B operand K-major only, so P V needs V as
// [hdim_v][keys] where TMA lands it as [keys][hdim_v]. Three warps of the producer warpgroup
// (idle otherwise: one thread issues every TMA) transpose each V block in shared memory as it
// lands, into a ring of transposed tiles the consumers wait for (vt_full), and write zeros for
// keys past the sequence's end (a paged block's stale slots, a batch tail's padding), so no
// NaN in unused cache memory can reach O through 0 x NaN.
//
// Layout: the transposed tile is hdim_v rows of 128 bytes (the block's 128 keys), one 128B-
// swizzled K-major panel. Within each 16 keys, row position 4t + i holds key
// 8 (i / 2) + 2t + (i % 2): the keys a consumer thread's S accumulators hold in that order, so
// P goes from the accumulators to the fp8 A operand without shuffles (Sm90Consumer::pack_p).
//
// Rings: the transposer frees a landed V tile (v_empty) as soon as it is transposed, and waits
// for the consumers to free the transposed one (vt_empty) before overwriting it, so the next V
// block's load never waits for a P V.
//
// Work split: a warp step moves 16 keys x 32 V columns (512 bytes) with one ldmatrix.trans, four
// byte permutes and one stmatrix. ldmatrix's 16-bit transpose hands each lane two keys' bytes of
// two adjacent V columns; a permute of the registers of keys 2t.. and 2t+8.. gives one column's
// four keys in P's order; stmatrix writes those words to the transposed rows. Each 8x8 tile's
// rows lie in 8 distinct 16-byte positions of the 128B swizzle on both sides, so neither side
// conflicts on banks (the stored tiles mix even and odd columns for that).
#pragma once

#include "fmha/fwd_sm90_params.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_traits.h"
#include "fmha/seq_info.h"
#include "tile/async_proxy.h"
#include "tile/ldmatrix.h"
#include "tile/mbarrier.h"

// A tuning knob (an NVRTC -D define) for measuring the transpose's cost:
// TILEFMHA_FP8_SKIP_TRANSPOSE skips its data movement (the barriers still complete; the results are
// then wrong).

namespace tilefmha::fmha {

TILEFMHA_DEVICE tile::u32 sm90_load_shared_u32(tile::u32 address) {
  tile::u32 value;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(value) : "r"(address) : "memory");
  return value;
}

TILEFMHA_DEVICE void sm90_store_shared_b32(tile::u32 address, tile::u32 value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

TILEFMHA_DEVICE tile::u32 sm90_byte_perm(tile::u32 a, tile::u32 b, tile::u32 selector) {
  tile::u32 result;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(result) : "r"(a), "r"(b), "r"(selector));
  return result;
}

// Keeps the bytes of keys below `valid` in an ldmatrix.trans register whose bytes 0-1 belong to
// key `key` and bytes 2-3 to key + 1 (the block's last, partial group only).
TILEFMHA_DEVICE tile::u32 sm90_keep_valid_keys(tile::u32 value, int key, int valid) {
  const tile::u32 low = key < valid ? 0x0000FFFFu : 0u;
  const tile::u32 high = key + 1 < valid ? 0xFFFF0000u : 0u;
  return value & (low | high);
}

// Transposes one landed V block (`raw`, [128 keys][hdim_v] in 128-element panels) into `out`;
// keys from `valid` on are written as zeros. `worker` in [0, 96).
//
// Step s moves keys 16 (s % 8) .. + 15 of the 16-byte chunk pair s / 8 (of 4 a panel) and
// panel s / 32. Everything that depends on the lane alone is formed once: the swizzle XOR of
// either side takes a row's position in its 8-row atom, and that position is the lane's (the
// rows a step adds are multiples of 8), so a step's addresses are a few shifts, masks and adds
// of the unsigned step (three warps stride the steps by 3, which no division by a power of two
// could strength-reduce in signed arithmetic).
template <class Traits>
TILEFMHA_DEVICE void sm90_transpose_block(tile::u32 raw, tile::u32 out, int valid, int worker) {
  constexpr tile::u32 kSteps = Traits::kHdimV / Traits::kPanelElements * 32;
  constexpr tile::u32 kWarps = Traits::kTransposerThreads / 32;
  static_assert(Traits::kBlockN == 128, "a transposed row is one 128-key panel row");
  const tile::u32 lane = tile::u32(worker) % 32u;
  const tile::u32 tile_of_lane = lane / 8u;  // the 8x8 tile whose row address this lane gives
  const tile::u32 row_of_lane = lane % 8u;
  const int t = int(lane % 4u);         // ldmatrix.trans: keys 2t, 2t + 1 of a tile's 8
  const bool upper_rows = lane >= 16u;  // stmatrix: tile rows 4..7 of this lane's registers
  // ldmatrix: tiles 0, 1 hold keys 16 g + 0..7 and + 8..15 of chunk 2 c, tiles 2, 3 the same of
  // chunk 2 c + 1. Row key (16 g + lane key) at byte (chunk ^ (key % 8)) * 16 of its row.
  const tile::u32 lane_key = 8u * (tile_of_lane % 2u) + row_of_lane;
  const tile::u32 raw_lane = raw + lane_key * kSm90RowBytes;
  const tile::u32 raw_swizzle = ((tile_of_lane / 2u) ^ row_of_lane) * 16u;
  // stmatrix: tile m, row i of a step holds V column 16 chunk + 2 i (+1 for odd rows, see
  // below), whose 16-byte position is the key group's g XORed with the column's row in its atom.
  const tile::u32 odd_row = (tile_of_lane % 2u) ^ (row_of_lane >= 4u ? 1u : 0u);
  const tile::u32 lane_column = 16u * (tile_of_lane / 2u) + 2u * row_of_lane + odd_row;
  const tile::u32 out_lane = out + lane_column * kSm90RowBytes;
  const tile::u32 out_swizzle = lane_column % 8u;
  // Stored tile 2j takes even columns in rows 0..3 and odd ones in rows 4..7 (tile 2j + 1 the
  // rest), so each tile's 8 rows fall in 8 distinct swizzle positions: the lane's byte-permute
  // selectors pick its column parity.
  const tile::u32 first_selector = upper_rows ? 0x7531u : 0x6420u;
  const tile::u32 second_selector = upper_rows ? 0x6420u : 0x7531u;
  for (tile::u32 step = tile::u32(worker) / 32u; step < kSteps; step += kWarps) {
    const tile::u32 group = step % 8u;  // keys 16 group .. + 15
    const tile::u32 pair = step / 8u;   // chunk pair, counted across panels
    tile::u32 loaded[4];
    tile::ldmatrix_x4_trans(raw_lane + (pair / 4u) * Traits::kVPanelBytes +
                                group * (16u * kSm90RowBytes) + (((pair % 4u) * 32u) ^ raw_swizzle),
                            loaded);
    if (int(16u * group) + 16 > valid) {
      const int first = int(16u * group) + 2 * t;
      loaded[0] = sm90_keep_valid_keys(loaded[0], first, valid);
      loaded[1] = sm90_keep_valid_keys(loaded[1], first + 8, valid);
      loaded[2] = sm90_keep_valid_keys(loaded[2], first, valid);
      loaded[3] = sm90_keep_valid_keys(loaded[3], first + 8, valid);
    }
    // Registers 2j, 2j + 1 hold keys {2t, 2t+1} and {2t+8, 2t+9} at V columns 2r, 2r + 1 of chunk
    // j's pair (r = lane / 4): one byte permute gathers each column's four keys in the order
    // P's accumulators hold them.
    tile::stmatrix_x4(out_lane + pair * (32u * kSm90RowBytes) + ((group ^ out_swizzle) * 16u),
                      sm90_byte_perm(loaded[0], loaded[1], first_selector),
                      sm90_byte_perm(loaded[0], loaded[1], second_selector),
                      sm90_byte_perm(loaded[2], loaded[3], first_selector),
                      sm90_byte_perm(loaded[2], loaded[3], second_selector));
  }
}

// The transposer warps' loop: the V blocks of the CTA's tiles in the producer's order.
template <class Traits, class Scheduler>
TILEFMHA_DEVICE void sm90_transpose_v(const Sm90FwdParams& params, const Scheduler& scheduler,
                                      tile::u32 smem, const Sm90Barriers<Traits::kStages>& barriers,
                                      int worker) {
  constexpr int kStages = Traits::kStages;
  const FwdParams& p = params.base;
  int step_base = 0;
  for (int index = scheduler.first(); index < scheduler.count(); index = scheduler.next(index)) {
    const Sm90Tile tile_id = scheduler.tile(index);
    const SeqInfo seq = SeqInfo::make<Traits::kGroupMode>(p, tile_id.batch);
    const Sm90TileRows<Traits> tile_rows(p, tile_id.m_block);
    if (tile_rows.past_end(seq)) continue;  // the producer skips it alike
    const auto blocks = tile_rows.visited_blocks(p, seq, tile_id.split);
    const int steps = blocks.count();
    for (int step = 0; step < steps; ++step) {
      const int stage = ring_stage<kStages>(step_base + step);
      const tile::u32 phase = ring_phase<kStages>(step_base + step);
      tile::mbarrier_wait(barriers.v_full(stage), phase);
      tile::mbarrier_wait(barriers.vt_empty(stage), phase ^ 1u);  // the consumers' P V is done
      const tile::u32 offset = stage * Traits::kSmem.v_stage_bytes;
#if !defined(TILEFMHA_FP8_SKIP_TRANSPOSE)
      sm90_transpose_block<Traits>(smem + Traits::kSmem.v_offset + offset,
                                   smem + Traits::kSmem.vt_offset + offset,
                                   seq.len_k - blocks.block(step) * Traits::kBlockN, worker);
#endif
      // The consumers' wgmma reads the tile through the async proxy.
      tile::fence_proxy_async_shared();
      tile::mbarrier_arrive(barriers.vt_full(stage));
      // The landed tile is read: the producer may load the next V block into it.
      __syncwarp();
      if (worker % 32 == 0) tile::mbarrier_arrive(barriers.v_empty(stage));
    }
    step_base += steps;
    if constexpr (!Traits::kPersistent) break;
  }
}

}  // namespace tilefmha::fmha
