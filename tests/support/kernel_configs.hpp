// Test support: kernel configs of a given tile with no features, which the codegen and GPU tests
// then edit.
#pragma once

#include "tilefmha/kernel_config.hpp"

namespace tilefmha::testing {

// A forward kernel of one pipeline and tile, with no features.
inline KernelConfig fwd_config(Pipeline pipeline, Arch arch, DType dtype, int hdim_q, int hdim_v,
                               int block_m, int block_n, int block_k, int warps, int stages) {
  KernelConfig c;
  c.family = Family::fwd;
  c.pipeline = pipeline;
  c.arch = arch;
  c.dtype = c.out_dtype = dtype;
  c.hdim_q = hdim_q;
  c.hdim_v = hdim_v;
  c.block_m = block_m;
  c.block_n = block_n;
  c.block_k = block_k;
  c.warps = warps;
  c.stages = stages;
  return c;
}

// The portable sm80_mma pipeline (block_k as KernelConfig defaults it).
inline KernelConfig sm80_fwd_config(DType dtype, int hdim_q, int hdim_v, int block_m, int block_n,
                                    int warps, int stages) {
  return fwd_config(Pipeline::sm80_mma, Arch::sm80, dtype, hdim_q, hdim_v, block_m, block_n,
                    KernelConfig{}.block_k, warps, stages);
}

// Hopper's sm90_ws pipeline: a producer warpgroup plus one consumer warpgroup per 64 rows, and
// the whole Q head dim per K step.
inline KernelConfig sm90_fwd_config(DType dtype, int hdim_q, int hdim_v, int block_m, int block_n,
                                    int stages = 2) {
  return fwd_config(Pipeline::sm90_ws, Arch::sm90, dtype, hdim_q, hdim_v, block_m, block_n, hdim_q,
                    4 * (block_m / 64 + 1), stages);
}

// The Hopper backward (bwd_dq_dk_dv on sm90_ws) in the tiles of data/arch/sm90.json: 128-query
// blocks at hdim 64, 64 above; 128 keys up to hdim 128, 64 at 256.
inline KernelConfig sm90_bwd_config(DType dtype, int hdim) {
  KernelConfig c = fwd_config(Pipeline::sm90_ws, Arch::sm90, dtype, hdim, hdim,
                              hdim == 64 ? 128 : 64, hdim == 256 ? 64 : 128, hdim, 12, 2);
  c.family = Family::bwd_dq_dk_dv;
  return c;
}

// The fp32 simt_f32 pipeline on CUDA cores: 32-wide K/V steps, 4 warps, no pipelining.
inline KernelConfig simt_fwd_config(int hdim_q, int hdim_v, int block_m) {
  return fwd_config(Pipeline::simt_f32, Arch::sm90, DType::fp32, hdim_q, hdim_v, block_m, 32, 32, 4,
                    1);
}

// Switches on a windowed mask, ALiBi, softcap, dropout, sink logits and LSE output, so that one
// config exercises every logit and epilogue hook of a generated kernel.
inline void enable_every_hook(KernelConfig& c) {
  c.mask = MaskKind::window;
  c.bias = BiasKind::alibi;
  c.softcap = true;
  c.dropout = true;
  c.sink_logit = true;
  c.lse = true;
}

}  // namespace tilefmha::testing
