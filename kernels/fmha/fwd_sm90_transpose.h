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
// Work split: lane (g = lane / 4, t = lane % 4) of a warp owns keys 16g + {2t, 2t+1, 2t+8,
// 2t+9} and, in iteration (u, v), the 4 V columns 16 (g ^ u) + 4 (t ^ v) + 0..3 of a panel: four
// 32-bit loads (one per key) become, by byte permutes, four 32-bit stores (one per column).
// The XORs spread each instruction's 32 accesses over 32 banks in both tiles' swizzles.
#pragma once

#include "fmha/fwd_sm90_params.h"
#include "fmha/fwd_sm90_pipeline.h"
#include "fmha/fwd_sm90_traits.h"
#include "fmha/seq_info.h"
#include "tile/async_proxy.h"
#include "tile/mbarrier.h"

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

// Transposes one landed V block (`raw`, [128 keys][hdim_v] in 128-element panels) into `out`;
// keys from `valid` on are written as zeros. `worker` in [0, 96). Four iterations at a time,
// so that 16 loads are in flight before the first permute waits for one.
template <class Traits>
TILEFMHA_DEVICE void sm90_transpose_block(tile::u32 raw, tile::u32 out, int valid, int worker) {
  constexpr int kIterations = Traits::kHdimV / Traits::kPanelElements * 32;  // 32 (u, v) a panel
  constexpr int kUnroll = 4;
  constexpr int kWarps = Traits::kTransposerThreads / 32;
  const int lane = worker % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int keys[4] = {16 * g + 2 * t, 16 * g + 2 * t + 1, 16 * g + 2 * t + 8, 16 * g + 2 * t + 9};
  for (int first = (worker / 32) * kUnroll; first < kIterations; first += kWarps * kUnroll) {
    tile::u32 rows[kUnroll][4];
#pragma unroll
    for (int n = 0; n < kUnroll; ++n) {
      const int iteration = first + n;
      const int panel = iteration / 32;
      const int chunk = g ^ ((iteration % 32) / 4);  // 16-byte chunk of the V row
      const int word = t ^ (iteration % 4);          // 4-byte word within it
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const tile::u32 address = raw + panel * Traits::kVPanelBytes + keys[k] * kSm90RowBytes +
                                  ((chunk ^ (keys[k] % 8)) * 16) + 4 * word;
        rows[n][k] = keys[k] < valid ? sm90_load_shared_u32(address) : 0u;
      }
    }
#pragma unroll
    for (int n = 0; n < kUnroll; ++n) {
      const int iteration = first + n;
      const int panel = iteration / 32;
      const int chunk = g ^ ((iteration % 32) / 4);
      const int word = t ^ (iteration % 4);
      // 4x4 byte transpose: column c's word gathers byte c of the four key rows.
      const tile::u32 low01 = sm90_byte_perm(rows[n][0], rows[n][1], 0x5140u);
      const tile::u32 high01 = sm90_byte_perm(rows[n][0], rows[n][1], 0x7362u);
      const tile::u32 low23 = sm90_byte_perm(rows[n][2], rows[n][3], 0x5140u);
      const tile::u32 high23 = sm90_byte_perm(rows[n][2], rows[n][3], 0x7362u);
      const tile::u32 columns[4] = {
          sm90_byte_perm(low01, low23, 0x5410u), sm90_byte_perm(low01, low23, 0x7632u),
          sm90_byte_perm(high01, high23, 0x5410u), sm90_byte_perm(high01, high23, 0x7632u)};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int row = panel * Traits::kPanelElements + 16 * chunk + 4 * word + c;  // V column
        sm90_store_shared_b32(out + row * kSm90RowBytes + ((g ^ (row % 8)) * 16) + 4 * t,
                              columns[c]);
      }
    }
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
      sm90_transpose_block<Traits>(smem + Traits::kSmem.v_offset + offset,
                                   smem + Traits::kSmem.vt_offset + offset,
                                   seq.len_k - blocks.block(step) * Traits::kBlockN, worker);
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
