#include "enumerate/tile_resources.hpp"

#include <algorithm>

#include "enumerate/family_traits.hpp"
#include "fmha/fwd_sm90_shape.h"
#include "templates/template_table.hpp"

namespace tilefmha::enumerate {
namespace {

// sm90_ws gives one warpgroup to TMA loads; it keeps no accumulators.
constexpr int64_t kProducerThreads = 128;
constexpr int64_t kFp32Bytes = 4;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// fp32 accumulator values a kernel holds in registers across its math threads.
int64_t accumulator_values(const KernelConfig& c) {
  const int64_t bm = c.block_m, bn = c.block_n, bk = c.block_k;
  const int64_t hq = c.hdim_q, hv = c.hdim_v;
  switch (c.family) {
    case Family::bwd_dq_dk_dv: return bn * (hq + hv) + 2 * bm * bn;  // dK, dV; S and dP
    case Family::fwd_splitkv_combine: return bm * bk;                // the O rows being merged
    case Family::fwd_appendkv: return bn * bk;                       // the new K rows
    case Family::bwd_dot_do_o:
    case Family::bwd_convert_dq: return bm * bk;
    default: return bm * (bn + hv);  // S (P overwrites it in place) and O
  }
}

}  // namespace

int64_t tile_smem_bytes(const KernelConfig& c) {
  // A kernel that exists states its own layout; the estimates below cover the rest.
  if (const templates::KernelTemplate* built =
          templates::find_kernel_template(c.family, c.pipeline);
      built != nullptr && !built->supports(c))
    return built->shared_bytes(c);
  const int64_t e = dtype_size(c.dtype);
  const int64_t bm = c.block_m, bn = c.block_n, stages = c.stages;
  const int64_t hq = c.hdim_q, hv = c.hdim_v;
  if (is_forward_like_family(c.family)) {
    if (c.pipeline == Pipeline::sm90_ws) {
      // The kernel's own layout (kernels/fmha/fwd_sm90_shape.h): Q, the K and V rings (and
      // fp8's transposed V ring), O where it fits beside them, the mbarriers and one swizzle
      // atom of slack.
      return fmha::sm90_smem_layout(c.hdim_q, c.hdim_v, c.block_m, c.block_n, c.stages,
                                    static_cast<int>(e))
          .bytes;
    }
    // Q tile once; K and V tiles per stage; O reuses them. FP8 keeps a transposed V copy.
    int64_t bytes = e * (bm * hq + stages * bn * (hq + hv));
    if (is_fp8(c.dtype)) bytes += e * stages * bn * hv;
    return bytes;
  }
  switch (c.family) {
    case Family::bwd_dq_dk_dv: {
      // Q and dO per stage, K and V once, P and dS; LSE and D rows (fp32) per stage.
      int64_t bytes = e * (stages * bm * (hq + hv) + bn * (hq + hv) + 2 * bm * bn) +
                      2 * kFp32Bytes * stages * bm;
      // sm90_ws stages the fp32 dQ tile for a TMA reduce-add; sm80_mma adds atomically.
      if (c.pipeline == Pipeline::sm90_ws) bytes += kFp32Bytes * bm * hq;
      return bytes;
    }
    case Family::fwd_splitkv_combine:
      // The LSE of every split for the block's rows, plus a row max and sum.
      return kFp32Bytes * bm * bn + 2 * kFp32Bytes * bm;
    default: return 0;  // append-KV, dot(dO, O), convert dQ work in registers
  }
}

TileResources estimate_tile_resources(const KernelConfig& c, const RegisterModel& model) {
  TileResources r;
  r.threads = 32 * int64_t(c.warps);
  const bool warp_specialized = c.pipeline == Pipeline::sm90_ws;
  r.math_threads = warp_specialized ? r.threads - kProducerThreads : r.threads;
  r.smem_bytes = tile_smem_bytes(c);
  if (r.math_threads <= 0) return r;
  r.registers_per_thread =
      model.overhead_per_thread + ceil_div(accumulator_values(c), r.math_threads);
  // sm90_ws feeds P to the PV wgmma from registers while the next S is computed, so P (packed
  // input-dtype values) lives beside S instead of overwriting it.
  if (warp_specialized && is_forward_like_family(c.family))
    r.registers_per_thread +=
        ceil_div(int64_t(c.block_m) * c.block_n * dtype_size(c.dtype), 4 * r.math_threads);
  r.registers_per_block = warp_specialized ? kProducerThreads * model.producer_warpgroup_registers +
                                                 r.math_threads * r.registers_per_thread
                                           : r.threads * r.registers_per_thread;
  return r;
}

std::optional<std::string> tile_limit_violation(const KernelConfig& config, const ArchSpec& spec) {
  const TileResources r = estimate_tile_resources(config, spec.registers);
  const ArchLimits& limits = spec.limits;
  auto over = [](std::string what, int64_t value, std::string limit, int64_t bound) {
    return what + " " + std::to_string(value) + " > " + limit + " " + std::to_string(bound);
  };
  if (r.math_threads <= 0) return "warps " + std::to_string(config.warps) + " leave no math warps";
  if (r.threads > limits.max_threads_per_block)
    return over("threads", r.threads, "max_threads_per_block", limits.max_threads_per_block);
  if (r.smem_bytes > limits.smem_per_block_optin_bytes)
    return over("shared memory (bytes)", r.smem_bytes, "smem_per_block_optin_bytes",
                limits.smem_per_block_optin_bytes);
  if (r.registers_per_thread > limits.registers_per_thread_max)
    return over("estimated registers per thread", r.registers_per_thread,
                "registers_per_thread_max", limits.registers_per_thread_max);
  if (r.registers_per_block > limits.registers_per_sm)
    return over("estimated registers per block", r.registers_per_block, "registers_per_sm",
                limits.registers_per_sm);
  return std::nullopt;
}

}  // namespace tilefmha::enumerate
