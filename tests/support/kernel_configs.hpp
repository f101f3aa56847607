// Test support: forward kernel configs of a given tile with no features, which the codegen and
// GPU tests then edit.
#pragma once

#include "tilefmha/kernel_config.hpp"

namespace tilefmha::testing {

// The portable sm80_mma pipeline.
inline KernelConfig sm80_fwd_config(DType dtype, int hdim_q, int hdim_v, int block_m, int block_n,
                                    int warps, int stages) {
  KernelConfig c;
  c.family = Family::fwd;
  c.pipeline = Pipeline::sm80_mma;
  c.arch = Arch::sm80;
  c.dtype = c.out_dtype = dtype;
  c.hdim_q = hdim_q;
  c.hdim_v = hdim_v;
  c.block_m = block_m;
  c.block_n = block_n;
  c.warps = warps;
  c.stages = stages;
  return c;
}

// Hopper's sm90_ws pipeline: a producer warpgroup plus one consumer warpgroup per 64 rows, and
// the whole Q head dim per K step.
inline KernelConfig sm90_fwd_config(DType dtype, int hdim_q, int hdim_v, int block_m, int block_n,
                                    int stages = 2) {
  KernelConfig c;
  c.family = Family::fwd;
  c.pipeline = Pipeline::sm90_ws;
  c.arch = Arch::sm90;
  c.dtype = c.out_dtype = dtype;
  c.hdim_q = hdim_q;
  c.hdim_v = hdim_v;
  c.block_m = block_m;
  c.block_n = block_n;
  c.block_k = hdim_q;
  c.warps = 4 * (block_m / 64 + 1);
  c.stages = stages;
  return c;
}

// The fp32 simt_f32 pipeline on CUDA cores: 32-wide K/V steps, 4 warps, no pipelining.
inline KernelConfig simt_fwd_config(int hdim_q, int hdim_v, int block_m) {
  KernelConfig c;
  c.family = Family::fwd;
  c.pipeline = Pipeline::simt_f32;
  c.arch = Arch::sm90;
  c.dtype = c.out_dtype = DType::fp32;
  c.hdim_q = hdim_q;
  c.hdim_v = hdim_v;
  c.block_m = block_m;
  c.block_n = 32;
  c.block_k = 32;
  c.warps = 4;
  c.stages = 1;
  return c;
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
