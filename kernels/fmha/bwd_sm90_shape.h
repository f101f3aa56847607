// Shape facts of the sm90_ws backward kernel (bwd_dq_dk_dv) that host and device must agree on:
// the warpgroup split and the shared-memory layout. Plain C++, no includes, so the launcher
// uses the very formulas the kernel uses.
//
// A CTA is one producer warpgroup plus two consumer warpgroups and owns one block of 128 keys
// of one KV head: each consumer owns 64 of the keys (a wgmma m64 tile), so its dK and dV rows
// stay in its registers for the whole CTA. Query blocks of block_m rows stream through a ring.
// Tiles are 64-element panels of 128-byte rows in 128B-swizzled 1024-byte atoms, as TMA writes
// them and wgmma reads them; dS^T is written in that layout too, so dQ = dS K reads it through
// an M-major descriptor.
#pragma once

namespace tilefmha::fmha {

constexpr int kSm90BwdConsumerGroups = 2;
constexpr int kSm90BwdKeysPerGroup = 64;
constexpr int kSm90BwdBlockN = kSm90BwdConsumerGroups * kSm90BwdKeysPerGroup;
constexpr int kSm90BwdThreads = (kSm90BwdConsumerGroups + 1) * 128;
constexpr int kSm90BwdRowBytes = 128;
constexpr int kSm90BwdPanelElements = 64;  // 16-bit elements of one 128-byte row
constexpr int kSm90BwdAtomBytes = 1024;
// Register split after setmaxnreg: 24 + 2 x 240 = 3 x 168, the launch allocation of 384 threads.
constexpr int kSm90BwdProducerRegisters = 24;
constexpr int kSm90BwdConsumerRegisters = 240;
// dS^T is double-buffered: a consumer writes the next block's while the other may still read
// this one's in its dQ GEMM.
constexpr int kSm90BwdDsBuffers = 2;

struct Sm90BwdSmemLayout {
  int k_offset;        // K block [128 keys][hdim_q]
  int v_offset;        // V block [128 keys][hdim_v]
  int q_offset;        // `stages` Q tiles [block_m][hdim_q]
  int do_offset;       // `stages` dO tiles [block_m][hdim_v]
  int ds_offset;       // 2 dS^T tiles [128 keys][block_m]
  int lse_offset;      // `stages` x block_m fp32: LSE in log2 units (+inf for rows without keys)
  int d_offset;        // `stages` x block_m fp32: D = rowsum(dO * O)
  int barrier_offset;  // kv_full, then q_full and q_empty per stage
  int q_stage_bytes;
  int do_stage_bytes;
  int ds_bytes;
  int bytes;  // everything, plus one atom of slack to align the base to 1024 bytes
};

constexpr int sm90_bwd_barrier_count(int stages) {
  return 1 + 2 * stages;
}

constexpr Sm90BwdSmemLayout sm90_bwd_smem_layout(int hdim_q, int hdim_v, int block_m, int stages) {
  constexpr int kElementBytes = 2;
  Sm90BwdSmemLayout layout{};
  layout.k_offset = 0;
  layout.v_offset = kSm90BwdBlockN * hdim_q * kElementBytes;
  layout.q_offset = layout.v_offset + kSm90BwdBlockN * hdim_v * kElementBytes;
  layout.q_stage_bytes = block_m * hdim_q * kElementBytes;
  layout.do_stage_bytes = block_m * hdim_v * kElementBytes;
  layout.do_offset = layout.q_offset + stages * layout.q_stage_bytes;
  layout.ds_bytes = kSm90BwdBlockN * block_m * kElementBytes;
  layout.ds_offset = layout.do_offset + stages * layout.do_stage_bytes;
  layout.lse_offset = layout.ds_offset + kSm90BwdDsBuffers * layout.ds_bytes;
  layout.d_offset = layout.lse_offset + stages * block_m * 4;
  layout.barrier_offset = layout.d_offset + stages * block_m * 4;
  layout.bytes = layout.barrier_offset + 8 * sm90_bwd_barrier_count(stages) + kSm90BwdAtomBytes;
  return layout;
}

}  // namespace tilefmha::fmha
