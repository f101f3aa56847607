// Shape facts of the sm80_mma forward kernel that host and device must agree on (tile widths,
// shared-memory size), as constexpr functions of the kernel's identity. Plain C++, no includes:
// the launch code uses the same formulas as the kernel it launches.
#pragma once

namespace tilefmha::fmha {

// Shared-memory tiles are built from 32-element (64-byte) panels, so a kernel's head dim is
// padded to a multiple of 32; the real dim is handled by predicated loads and stores.
constexpr int kHeadDimGranule = 32;

constexpr int padded_head_dim(int hdim) {
  return (hdim + kHeadDimGranule - 1) / kHeadDimGranule * kHeadDimGranule;
}

// Q tile, then `stages` K tiles, then `stages` V tiles; the O tile reuses the space after the
// main loop.
constexpr int fwd_sm80_shared_bytes(int hdim_q, int hdim_v, int block_m, int block_n, int stages,
                                    int element_bytes) {
  const int dq = padded_head_dim(hdim_q);
  const int dv = padded_head_dim(hdim_v);
  const int mainloop = (block_m * dq + stages * block_n * (dq + dv)) * element_bytes;
  const int output = block_m * dv * element_bytes;
  return mainloop > output ? mainloop : output;
}

}  // namespace tilefmha::fmha
