#include "sweep_validate.hpp"

#include <cstdio>

#include "run_gpu.hpp"
#include "sweep_problem.hpp"

namespace tilefmha::cli {
namespace {

// Whether bench --verify's slices reproduce `p` exactly: its slices shift query rows (so no
// dropout, whose random numbers follow the row, and no fp8 descale tables indexed by it) and
// re-align a causal mask top-left, which is the same mask as bottom-right only when
// seqlen_q == seqlen_k.
bool sliceable(const Problem& p) {
  if (p.family != Family::fwd || p.mode != Mode::batch || p.has_dropout() ||
      p.bias_kind != BiasKind::none || !p.sink_logits.empty() ||
      p.fp8.kind == Fp8ScaleKind::per_block || p.fp8.kind == Fp8ScaleKind::per_page)
    return false;
  if (p.mask.kind == MaskKind::none) return true;
  return p.mask.kind == MaskKind::causal &&
         (p.mask.align == MaskAlign::top_left || p.seqlen_q == p.seqlen_k);
}

std::string work_text(double work) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", work);
  return text;
}

}  // namespace

RowValidation validate_row(const Problem& host, double work_budget) {
  RowValidation out;
  const double work = reference_work(host);
  if (work <= work_budget) {
    const Validation v = validate_against_reference({host});
    out.status = v.passed ? "passed" : "failed";
    out.scope = "every sequence, head and row";
    out.report = v.report;
    out.max_abs_error = v.max_abs_error;
    out.mismatches = v.mismatches;
    out.compared = v.compared;
    return out;
  }
  if (!sliceable(host)) {
    out.scope = "skipped: the reference's " + work_text(work) +
                " multiply-adds exceed the budget of " + work_text(work_budget) +
                " and the problem cannot be sliced";
    return out;
  }
  Problem top_left = host;
  if (top_left.mask.kind == MaskKind::causal) top_left.mask.align = MaskAlign::top_left;
  const VerifyResult v = verify_against_reference(top_left, work_budget);
  out.status = v.status;
  out.scope = v.scope;
  out.max_abs_error = v.max_abs_error;
  out.mismatches = v.mismatches;
  out.compared = v.compared;
  if (v.status == "failed")
    out.report = std::to_string(v.mismatches) + " of " + std::to_string(v.compared) +
                 " elements outside the tolerance";
  return out;
}

void put_validation(const RowValidation& v, nlohmann::ordered_json& row) {
  row["validated"] = v.status == "passed";
  row["validation"] = v.status == "skipped" ? v.scope : v.status + ": " + v.scope;
  row["max_abs_error"] = v.status == "skipped" ? nlohmann::ordered_json(nullptr)
                                               : nlohmann::ordered_json(v.max_abs_error);
  if (v.status != "failed") return;
  std::string lines = v.report;
  while (!lines.empty() && lines.back() == '\n') lines.pop_back();
  for (char& c : lines)
    if (c == '\n') c = ';';
  row["status"] = "mismatch";
  row["reason"] = "GPU output disagrees with the CPU reference: " + lines;
}

}  // namespace tilefmha::cli
