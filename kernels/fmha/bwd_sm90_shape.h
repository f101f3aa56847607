// Shape facts of the sm90_ws backward kernel (bwd_dq_dk_dv) that host and device must agree on:
// the warpgroup split and the shared-memory layout. Plain C++ (the panel, atom and shared-memory
// facts come from the forward's fwd_sm90_shape.h), so the launcher uses the very formulas the
// kernel uses.
//
// A CTA is one producer warpgroup plus two consumer warpgroups and owns one block of keys of
// one KV head. Up to hdim 128 the block has 128 keys and each consumer owns 64 of them (a wgmma
// m64 tile) with every column of their dK and dV, which stay in its registers for the whole CTA.
// At hdim 256 that would take 256 registers a thread, so the block has 64 keys and the consumers
// split the columns instead: both compute the same S^T and dP^T (the two score GEMMs run twice,
// 1.4x the FLOPs) and each keeps half of dK's and dV's columns and makes half of dQ's.
// Query blocks of block_m rows stream through a ring. Tiles are 64-element panels of 128-byte
// rows in 128B-swizzled 1024-byte atoms, as TMA writes them and wgmma reads them; dS^T is
// written in that layout too, so dQ = dS K reads it through an M-major descriptor. The consumers
// leave each block's dQ in shared memory, and a producer thread per dQ tile adds it to the
// accumulator (head-major, so the block's rows are contiguous) with a bulk reduction, off the
// consumers' path. Where no dQ tile of its own fits (hdim 256), dQ is written over the ring stage
// whose Q and dO the block has just consumed: the tile is exactly as large (fp32 against two 16-bit
// tiles), and the stage goes back to the producer once the reduction has read it.
#pragma once

#include "fmha/fwd_sm90_shape.h"

namespace tilefmha::fmha {

constexpr int kSm90BwdConsumerGroups = 2;
constexpr int kSm90BwdKeysPerGroup = 64;  // a wgmma m64 tile
// Head dims over 128 split dK/dV's columns between the consumers (above).
constexpr bool sm90_bwd_splits_columns(int hdim_q) {
  return hdim_q > 128;
}
constexpr int sm90_bwd_block_n(int hdim_q) {
  return sm90_bwd_splits_columns(hdim_q) ? kSm90BwdKeysPerGroup
                                         : kSm90BwdConsumerGroups * kSm90BwdKeysPerGroup;
}
constexpr int kSm90BwdThreads = (kSm90BwdConsumerGroups + 1) * kSm90WarpgroupThreads;
// Register split after setmaxnreg, the forward's for two consumers: 24 + 2 x 240 = 3 x 168.
constexpr int kSm90BwdProducerRegisters = sm90_producer_registers(kSm90BwdConsumerGroups);
constexpr int kSm90BwdConsumerRegisters = sm90_consumer_registers(kSm90BwdConsumerGroups);
// dS^T is double-buffered: a consumer writes the next block's while the other may still read
// this one's in its dQ GEMM.
constexpr int kSm90BwdDsBuffers = 2;

struct Sm90BwdSmemLayout {
  int k_offset;          // K block [128 keys][hdim_q]
  int v_offset;          // V block [128 keys][hdim_v]
  int q_offset;          // `stages` Q tiles [block_m][hdim_q]
  int do_offset;         // `stages` dO tiles [block_m][hdim_v]
  int ds_offset;         // 2 dS^T tiles [128 keys][block_m]
  int lse_offset;        // `stages` x block_m fp32: LSE in log2 units (+inf for rows without keys)
  int d_offset;          // `stages` x block_m fp32: D = rowsum(dO * O)
  int dq_offset;         // 1 or 2 fp32 dQ tiles [block_m][hdim_q], chunk-swizzled rows
  int barrier_offset;    // kv_full, q_full and q_empty per stage, then dq_full and dq_empty per
                         // dQ tile (barriers_in_gap: only when the alignment gap cannot hold them)
  bool barriers_in_gap;  // the mbarriers go in the alignment gap below the tiles where it holds
                         // them: what lets a second dQ tile fit (hdim 64)
  int q_stage_bytes;
  int do_stage_bytes;
  int ds_bytes;
  int dq_row_bytes;
  int dq_bytes;    // one dQ tile
  int dq_buffers;  // 2 where they fit: the writer's bulk copy of block i overlaps block i + 1;
                   // 0: the tile is written over the block's own Q/dO ring stage (above)
  int bytes;       // everything, plus the alignment gap below the tiles
};

// K/V full, per stage full and empty, two dQ full and empty, K/V empty (Sm90BwdBarriers).
constexpr int sm90_bwd_barrier_count(int stages) {
  return 1 + 2 * stages + 2 * 2 + 1;
}

// The tiles start at the first 1024-byte boundary of the dynamic shared window, which CUDA aligns
// to 16 bytes only: up to 1008 bytes below them go unused, and a layout reserves a whole atom for
// that beside its mbarriers. Where that misses a second dQ tile (hdim 64, by 80 bytes), the
// mbarriers live in the gap where it holds them, else after the rows
// (sm90_bwd_barrier_position), so the gap alone is the tail beyond the rows.
constexpr int kSm90DynamicSharedAlignment = 16;
constexpr int kSm90BwdMaxAlignmentGap = kSm90AtomBytes - kSm90DynamicSharedAlignment;
constexpr int sm90_bwd_gap_tail_bytes(int stages) {
  const int barrier_bytes = 8 * sm90_bwd_barrier_count(stages);
  // A gap too small for the barriers is at most barrier_bytes - 16.
  const int small_gap = barrier_bytes - kSm90DynamicSharedAlignment + barrier_bytes;
  return small_gap > kSm90BwdMaxAlignmentGap ? small_gap : kSm90BwdMaxAlignmentGap;
}

// The dQ tile is dense [block_m][hdim_q] fp32 in the accumulator's own row order, so one bulk
// copy moves it; within each 64-column panel the 8-float chunks of a row are XOR-swizzled by
// the row's packed index (fmha::BwdParams::dq_acc_swizzled), which keeps a warp's float2 stores
// at the minimum two wavefronts.
constexpr int sm90_bwd_dq_row_bytes(int hdim_q) {
  return hdim_q * 4;
}

constexpr Sm90BwdSmemLayout sm90_bwd_smem_layout(int hdim_q, int hdim_v, int block_m, int stages) {
  constexpr int kElementBytes = 2;
  Sm90BwdSmemLayout layout{};
  const int block_n = sm90_bwd_block_n(hdim_q);
  layout.k_offset = 0;
  layout.v_offset = block_n * hdim_q * kElementBytes;
  layout.q_offset = layout.v_offset + block_n * hdim_v * kElementBytes;
  layout.q_stage_bytes = block_m * hdim_q * kElementBytes;
  layout.do_stage_bytes = block_m * hdim_v * kElementBytes;
  layout.do_offset = layout.q_offset + stages * layout.q_stage_bytes;
  layout.ds_bytes = block_n * block_m * kElementBytes;
  layout.ds_offset = layout.do_offset + stages * layout.do_stage_bytes;
  layout.dq_offset = layout.ds_offset + kSm90BwdDsBuffers * layout.ds_bytes;
  layout.dq_row_bytes = sm90_bwd_dq_row_bytes(hdim_q);
  layout.dq_bytes = block_m * layout.dq_row_bytes;
  const int rows_bytes = 2 * stages * block_m * 4;  // LSE and D
  const int barriers_beside_tail = 8 * sm90_bwd_barrier_count(stages) + kSm90AtomBytes;
  const auto fits_with = [&](int dq_tiles, int tail) {
    return layout.dq_offset + dq_tiles * layout.dq_bytes + rows_bytes + tail <= kSm90MaxSharedBytes;
  };
  layout.barriers_in_gap =
      !fits_with(2, barriers_beside_tail) && fits_with(2, sm90_bwd_gap_tail_bytes(stages));
  const int tail = layout.barriers_in_gap ? sm90_bwd_gap_tail_bytes(stages) : barriers_beside_tail;
  const auto fits = [&](int dq_tiles) { return fits_with(dq_tiles, tail); };
  const bool stage_holds_dq = layout.dq_bytes == layout.q_stage_bytes + layout.do_stage_bytes;
  // Without room for a tile of its own, over the stage where it is as large; otherwise one tile
  // (the launcher then refuses the layout as too large).
  layout.dq_buffers = fits(2) ? 2 : (fits(1) || !stage_holds_dq) ? 1 : 0;
  layout.lse_offset = layout.dq_offset + layout.dq_buffers * layout.dq_bytes;
  layout.d_offset = layout.lse_offset + stages * block_m * 4;
  layout.barrier_offset = layout.d_offset + stages * block_m * 4;
  layout.bytes = layout.barrier_offset + tail;
  return layout;
}

// Where the mbarriers start, in bytes from the tiles' base, given the alignment gap below that
// base (a multiple of 16, at most kSm90BwdMaxAlignmentGap): after the rows, or with
// barriers_in_gap at the window's start, inside the gap, where it holds them.
constexpr int sm90_bwd_barrier_position(const Sm90BwdSmemLayout& layout, int stages, int gap) {
  return layout.barriers_in_gap && gap >= 8 * sm90_bwd_barrier_count(stages)
             ? -gap
             : layout.barrier_offset;
}

}  // namespace tilefmha::fmha
