// `tilefmha bench --verify`: the GPU's O (and LSE) of a benchmark shape against the CPU
// reference. Big shapes would keep the reference busy for minutes, so only a slice within a
// work budget is recomputed: the whole problem when cheap, else the first heads of batch 0,
// else the first and last query rows of head 0 (the last rows see every key under a causal
// mask).
#pragma once

#include <cstdint>
#include <string>

#include "tilefmha/problem.hpp"

namespace tilefmha::cli {

struct VerifyResult {
  std::string status = "skipped";  // skipped, passed, failed
  std::string scope;               // what was compared, e.g. "batch 0, heads 0-3, all rows"
  double max_abs_error = 0;
  int64_t mismatches = 0;  // elements outside runtime::o_tolerance / lse_tolerance (NaN too)
  int64_t compared = 0;
  double seconds = 0;  // reference time
};

// Multiply-adds (query rows x keys x (hdim_q + hdim_v)) the reference may spend per shape:
// about a second on a 16-core host.
inline constexpr double kVerifyWorkBudget = 4e9;

// `host` is a batch-mode fwd problem with mask none or causal top-left (fp8 inputs with
// per-tensor descales: a slice's shifted rows would misread per-block tables) whose O (and LSE)
// host views hold what the GPU wrote. Throws Error(invalid_argument) for other problems.
VerifyResult verify_against_reference(const Problem& host, double work_budget = kVerifyWorkBudget);

}  // namespace tilefmha::cli
