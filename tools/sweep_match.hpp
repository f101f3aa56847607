// `tilefmha sweep`'s match table: each matrix shape against the built kernels of its stages,
// by the dispatcher's own rule (runtime::rejection_reason). A shape that a stage has no kernel
// for becomes one `unserved` row carrying the closest candidate's reason, never dropped. The
// matrix has no KV-layout axis, so a paged shape matches kernels of either layout.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/matrix.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::cli {

struct SweepMatch {
  const bench::MatrixShape* shape = nullptr;
  std::string status;  // match, unserved
  Family stage = Family::fwd;
  std::optional<KernelConfig> kernel;  // the matching kernel, or the closest candidate
  std::string reason;                  // unserved: why the closest candidate does not fit
};

// The problem family a sweep variant benchmarks: fwd, bwd (bwd_dq_dk_dv), splitkv, pagedkv,
// appendkv, batch_prefill. Throws Error(invalid_argument) naming an unknown variant.
Family variant_family(const std::string& variant);

// Rows in shape order; for each shape every fitting kernel of every stage, or one unserved row.
std::vector<SweepMatch> match_shapes(const std::vector<bench::MatrixShape>& shapes,
                                     const std::vector<KernelConfig>& built, Arch arch);

// One row as an ordered object: the shape (problem_*), the status, every KernelConfig field and
// the timing and validation columns (null when not timed / not validated).
nlohmann::ordered_json sweep_row_json(const SweepMatch& match);

}  // namespace tilefmha::cli
