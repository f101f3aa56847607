// The host problem `tilefmha sweep` times (and validates) for one matched (shape, kernel) row:
// random inputs in host memory, built by one function per family so that a family the GPU
// gains (fwd_appendkv next) is one more builder and one more case in build_host_problem.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench/matrix.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::cli {

// Owns the memory behind `problem`'s views. Not copyable: a copy's views would point at the
// original's bytes (moving keeps them valid, vectors keep their buffers).
struct HostProblem {
  std::vector<std::byte> q, k, v, o, lse;  // paged families: k and v are the page pools
  Problem problem;
  double flops = 0;  // 2 * hq * (dq + dv) per visible (query, key) pair
  double bytes = 0;  // Q read, the K/V rows of the sequences' keys read, O (and LSE) written

  HostProblem() = default;
  HostProblem(HostProblem&&) = default;
  HostProblem& operator=(HostProblem&&) = default;
  HostProblem(const HostProblem&) = delete;
  HostProblem& operator=(const HostProblem&) = delete;
};

// Sets `host` up for `shape` as `kernel` (the row's matched kernel) needs it. Returns "" when it
// could, else why not (the row's "untimed" reason, naming the family or feature).
std::string build_host_problem(const bench::MatrixShape& shape, const KernelConfig& kernel,
                               HostProblem& host);

// The per-family builders behind build_host_problem, same contract.
// fwd (sweep_problems_fwd.cpp): contiguous bshd Q/K/V/O, batch or group mode.
std::string build_fwd_problem(const bench::MatrixShape& shape, HostProblem& host);
// fwd_pagedkv and batch_prefill (sweep_problems_paged.cpp): a shuffled page pool in the kernel's
// table form and KV layout, NaN wherever no sequence's key lives.
std::string build_paged_problem(const bench::MatrixShape& shape, const KernelConfig& kernel,
                                HostProblem& host);

// Shared by the builders (sweep_problem.cpp).
// The shape's features on `builder`: mask, softcap, dropout, fp8 per-tensor scales, and when the
// shape asks for LSE its buffer, fp32 [batch, nhead_q, rows] (group mode: batch 1, rows = every
// query token).
void apply_shape_features(const bench::MatrixShape& shape, int64_t batch, int64_t rows,
                          ProblemBuilder& builder, HostProblem& host);
// (query, key) pairs the mask leaves visible, summed over every sequence of `problem`.
double visible_pairs(const Problem& problem);
// Multiply-adds the CPU reference spends on `problem`: visible pairs * hq * (dq + dv).
double reference_work(const Problem& problem);

}  // namespace tilefmha::cli
