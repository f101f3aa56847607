// `tilefmha sweep --validate`: a timed row's GPU output against the CPU reference on the same
// inputs, with the tolerances of `run --validate` (runtime/tolerance.hpp). The whole problem is
// recomputed when the reference's work fits the budget (every smoke-tier paged shape does);
// larger batch-mode fwd shapes fall back to `bench --verify`'s slice; others are skipped, the
// row saying why.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_verify.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::cli {

struct RowValidation {
  std::string status = "skipped";  // passed, failed, skipped
  std::string scope;               // what was compared, or why nothing was
  std::string report;              // failed: the agreement line of each output
  double max_abs_error = 0;
  int64_t mismatches = 0;  // elements outside the tolerance (NaN included)
  int64_t compared = 0;
};

// `host`'s O (and LSE) views hold what the GPU wrote; its inputs are the ones the GPU read.
RowValidation validate_row(const Problem& host, double work_budget = kVerifyWorkBudget);

// The row's columns validated, validation ("passed: <scope>", "failed: <scope>" or why it was
// skipped) and max_abs_error; a failure also makes the row's status "mismatch", the agreement
// lines its reason.
void put_validation(const RowValidation& validation, nlohmann::ordered_json& row);

}  // namespace tilefmha::cli
