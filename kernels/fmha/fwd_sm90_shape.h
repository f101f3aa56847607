// Shape facts of the sm90_ws forward kernel that host and device must agree on: the
// warpgroup split of a tile, the shared-memory layout and the register split. Plain C++, no
// includes, so the launcher uses the very formulas the kernel uses.
//
// A CTA is one producer warpgroup (TMA) plus block_m / 64 consumer warpgroups, each owning 64
// query rows. Tiles are stored as 64-element panels of 128-byte rows in 128B-swizzled atoms
// (8 rows, 1024 bytes), the layout TMA writes and wgmma descriptors read. FP8 inputs fill a
// 128-byte row with 128 elements; O stays 16-bit.
#pragma once

namespace tilefmha::fmha {

constexpr int kSm90WarpgroupThreads = 128;
constexpr int kSm90WarpgroupRows = 64;  // rows of one wgmma m64 tile
// Query rows a decode tile on warp MMAs holds (fwd_sm90_warp_decode.h): one m16n8k16 tile.
constexpr int kSm90WarpDecodeRows = 16;
constexpr int kSm90PanelElements = 64;  // 16-bit elements per 128-byte swizzled row
constexpr int kSm90RowBytes = 128;      // one panel row
// Elements of `element_bytes` each in one panel row: 64 (16-bit), 128 (fp8).
constexpr int sm90_panel_elements(int element_bytes) {
  return kSm90RowBytes / element_bytes;
}
// FP8 key blocks: the transposed V tile holds a block's keys in one 128-byte row per column
// of V, one swizzled panel (fwd_sm90_transpose.h).
constexpr int kSm90Fp8BlockN = 128;
// The smallest page the paged kernels read a box at a time: 8 rows of 128 bytes are one whole
// 1024-byte swizzle atom, so every box starts on an atom.
constexpr int kSm90MinPageRows = 8;
constexpr int kSm90AtomBytes = 1024;  // 8 rows: the swizzle pattern's period

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128B-swizzled panel whose
// base is 1024-byte aligned: the chunk index is XORed with the row's position in its atom.
constexpr int sm90_swizzled_offset(int row, int chunk) {
  return row * kSm90RowBytes + ((chunk ^ (row % 8)) * 16);
}

constexpr int kSm90MaxConsumerGroups = 3;

// Split-KV kernels that merge their splits inside the kernel (fwd_sm90_cluster_merge.h) run the
// splits of a tile as one thread block cluster: at most Hopper's non-portable cluster size (past
// the portable 8, the launch opts in: jit::prepare_launch). A row merges its splits' partials in
// batches of kSm90ClusterMergeBatch, read together.
constexpr int kSm90MaxClusterSplits = 16;
constexpr int kSm90ClusterMergeBatch = 8;

constexpr int sm90_consumer_groups(int block_m) {
  return block_m / kSm90WarpgroupRows;
}
constexpr int sm90_threads(int block_m) {
  return (sm90_consumer_groups(block_m) + 1) * kSm90WarpgroupThreads;
}

// Register budget per thread after setmaxnreg: the producer keeps little, consumers take what
// it frees. FP8 kernels give the producer warpgroup more (fp8_producer), since three of its
// warps transpose V; their consumers need fewer, as P takes a quarter of S's registers. Each pair
// uses exactly the block's launch allocation (65536 / (threads x CTAs per SM), rounded down to 8):
// 2 consumers 24 + 2 x 240 = 3 x 168, 3 consumers 32 + 3 x 160 = 4 x 128, and one consumer in each
// of two CTAs per SM 24 + 232 = 2 x 128. A lone consumer in a CTA that has the SM to itself keeps
// the 255-register cap without reallocating.
// FP8 with two consumers: the transposer warps take 56 registers (measured 8% faster than 40 at
// hdim 128, H100), unless the consumers' O needs the 232 that 40 leaves (hdim_v 256).
constexpr int sm90_fp8_producer_registers(int consumer_groups, int hdim_v) {
  if (consumer_groups == 3) return 56;
  return consumer_groups == 2 && hdim_v <= 128 ? 56 : 40;
}
constexpr int sm90_producer_registers(int consumer_groups, bool fp8 = false, int hdim_v = 0) {
  if (fp8) return sm90_fp8_producer_registers(consumer_groups, hdim_v);
  return consumer_groups == 3 ? 32 : 24;
}
// The launch allocation of a CTA's threads, in registers per thread over all warpgroups.
constexpr int sm90_launch_registers(int consumer_groups) {
  return consumer_groups == 3 ? 512 : consumer_groups == 2 ? 504 : 256;
}
constexpr int sm90_consumer_registers(int consumer_groups, bool fp8 = false, int hdim_v = 0) {
  // Each pair sums to the launch allocation (512, 504 or 256 registers a thread over 4, 3 or
  // 2 warpgroups): fp8 56 + 3 x 152, 56 + 2 x 224 or 40 + 2 x 232, 40 + 216.
  if (fp8) {
    return (sm90_launch_registers(consumer_groups) -
            sm90_fp8_producer_registers(consumer_groups, hdim_v)) /
           consumer_groups;
  }
  return consumer_groups == 3 ? 160 : (consumer_groups == 2 ? 240 : 232);
}
// The gather entry of a paged 16-bit kernel (fwd_sm90_gather.h): its producer warpgroup's
// addressing (several 64-bit row offsets in flight between shuffles and copies) does not fit 24
// registers, nor 40 (128-row tiles spilled there), so it takes 56, as fp8's transposers do, and
// the consumers the rest: 56 + 3 x 152, 56 + 2 x 224, 56 + 200.
constexpr int kSm90GatherProducerRegisters = 56;
constexpr int sm90_gather_consumer_registers(int consumer_groups) {
  return (sm90_launch_registers(consumer_groups) - kSm90GatherProducerRegisters) / consumer_groups;
}

// How a consumer warpgroup orders its two GEMMs and the softmax:
//   serial    S = QK^T, softmax, O += PV, one after the other (the reference schedule);
//   overlap   S(j) = QK(j)^T and O += P(j-1)V(j-1) in flight together while the softmax of
//             block j waits only for S(j) (intra-warpgroup overlap);
//   pingpong  overlap, plus consumer warpgroups take turns issuing GEMMs (named barriers), so
//             one's softmax runs under another's tensor-core work.
enum class Sm90Schedule : int { serial = 0, overlap = 1, pingpong = 2 };

// How an fp8 kernel dequantizes (fp8 inputs are codes times a descale): per_tensor folds the Q
// and K descales into the softmax scale on the host and multiplies O by V's; per_block reads
// one descale per 128 tokens of each head (FwdParams::fp8_*_block) and applies them in the main
// loop; per_page (paged caches) reads K's and V's per page and KV head and Q's per tensor.
// Kernels on 16-bit inputs are `none`.
enum class Sm90Descale : int { none = 0, per_tensor = 1, per_block = 2, per_page = 3 };

struct Sm90SmemLayout {
  int q_offset;        // Q tile
  int o_offset;        // O tile of the epilogue: its own buffer where it fits, else the Q tile's
  int k_offset;        // `stages` K tiles
  int v_offset;        // `stages` V tiles
  int vt_offset;       // fp8: `stages` transposed V tiles (else v_offset)
  int barrier_offset;  // mbarriers: q_full, q_empty, then k_full, k_empty, v_full, v_empty
                       // (and fp8's vt_full, vt_empty) per stage
  int k_stage_bytes;
  int v_stage_bytes;
  // O's 64-column panels per pass through its buffer: all of them, except where O shares a Q
  // buffer smaller than itself (fp8 Q beside a 16-bit O) and leaves it in several passes.
  int o_pass_panels;
  int bytes;  // everything, plus alignment slack for the 1024-byte swizzle atoms
  // O has a buffer of its own, so the Q tile is free once the tile's last S = QK^T is done and
  // a persistent CTA's next Q loads under this tile's last PV GEMM and epilogue.
  constexpr bool separate_o() const { return o_offset != q_offset; }
};

// Hopper's shared memory per block (the opt-in maximum).
constexpr int kSm90MaxSharedBytes = 232448;

constexpr int sm90_barrier_count(int stages, bool fp8 = false) {
  return 2 + (fp8 ? 6 : 4) * stages;
}

// Q, then K and V rings (and fp8's transposed V ring), then (where the total stays within
// kSm90MaxSharedBytes) O, then the barriers. Every tile is a multiple of the 1024-byte swizzle
// atom, so each stays aligned. `element_bytes`: Q, K and V (2, or 1 for fp8); O is 16-bit.
constexpr Sm90SmemLayout sm90_smem_layout(int hdim_q, int hdim_v, int block_m, int block_n,
                                          int stages, int element_bytes = 2) {
  constexpr int kOutputBytes = 2;
  const bool fp8 = element_bytes == 1;
  const int barrier_bytes = 8 * sm90_barrier_count(stages, fp8);
  Sm90SmemLayout layout{};
  layout.q_offset = 0;
  layout.k_stage_bytes = block_n * hdim_q * element_bytes;
  layout.v_stage_bytes = block_n * hdim_v * element_bytes;
  const int v_rings = (fp8 ? 2 : 1) * stages * layout.v_stage_bytes;
  const int rings = stages * layout.k_stage_bytes + v_rings;
  const int q_bytes = block_m * hdim_q * element_bytes;
  const int o_bytes = block_m * hdim_v * kOutputBytes;
  // The dynamic shared window is not promised 1024-byte alignment: the kernel rounds its base
  // up, so one atom of slack is requested.
  const bool separate =
      q_bytes + rings + o_bytes + barrier_bytes + kSm90AtomBytes <= kSm90MaxSharedBytes;
  // Without a buffer of its own, O passes through Q's in as many panels as fit and divide O's:
  // a second Q-sized buffer would cost an fp8 hdim-256 tile its second pipeline stage.
  const int o_panels = (hdim_v * kOutputBytes + kSm90RowBytes - 1) / kSm90RowBytes;
  const int q_panels = (hdim_q * element_bytes + kSm90RowBytes - 1) / kSm90RowBytes;
  layout.o_pass_panels = o_panels;
  while (!separate && (layout.o_pass_panels > q_panels || o_panels % layout.o_pass_panels != 0))
    --layout.o_pass_panels;
  layout.k_offset = q_bytes;
  layout.v_offset = layout.k_offset + stages * layout.k_stage_bytes;
  layout.vt_offset = fp8 ? layout.v_offset + stages * layout.v_stage_bytes : layout.v_offset;
  const int rings_end = layout.k_offset + rings;
  layout.o_offset = separate ? rings_end : layout.q_offset;
  layout.barrier_offset = separate ? layout.o_offset + o_bytes : rings_end;
  layout.bytes = layout.barrier_offset + barrier_bytes + kSm90AtomBytes;
  return layout;
}

// CTAs that share an SM: two where a one-consumer tile (block_m 64) leaves room in shared memory
// for a second (each CTA also takes 1 KiB of reserved shared memory), so one CTA's tile ramp
// and epilogue run under the other's main loop; else one.
constexpr int kSm90SharedBytesPerSm = 233472;
constexpr int kSm90ReservedSharedBytesPerCta = 1024;
constexpr int sm90_ctas_per_sm(int block_m, int smem_bytes) {
  return sm90_consumer_groups(block_m) == 1 &&
                 2 * (smem_bytes + kSm90ReservedSharedBytesPerCta) <= kSm90SharedBytesPerSm
             ? 2
             : 1;
}

}  // namespace tilefmha::fmha
