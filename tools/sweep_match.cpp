#include "sweep_match.hpp"

#include "kernel_fields_json.hpp"
#include "runtime/kernel_match.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

using json = nlohmann::ordered_json;

std::string lengths_text(const std::vector<int64_t>& lengths) {
  std::string out;
  for (size_t i = 0; i < lengths.size(); ++i) out += (i ? " " : "") + std::to_string(lengths[i]);
  return out;
}

}  // namespace

Family variant_family(const std::string& variant) {
  if (variant == "fwd") return Family::fwd;
  if (variant == "bwd") return Family::bwd_dq_dk_dv;
  if (variant == "splitkv") return Family::fwd_splitkv;
  if (variant == "pagedkv") return Family::fwd_pagedkv;
  if (variant == "appendkv") return Family::fwd_appendkv;
  if (variant == "batch_prefill") return Family::batch_prefill;
  throw Error(ErrorKind::invalid_argument,
              "--variant '" + variant +
                  "': expected fwd, bwd, splitkv, pagedkv, appendkv or batch_prefill");
}

std::vector<SweepMatch> match_shapes(const std::vector<bench::MatrixShape>& shapes,
                                     const std::vector<KernelConfig>& built, Arch arch) {
  std::vector<SweepMatch> rows;
  for (const bench::MatrixShape& shape : shapes) {
    const Problem problem = shape.to_problem();
    std::vector<SweepMatch> fits;
    std::optional<SweepMatch> unserved;
    for (Family stage : runtime::stage_families(problem)) {
      bool stage_served = false;
      SweepMatch closest{&shape, "unserved", stage, std::nullopt,
                         "no built kernel of family " + std::string(to_string(stage))};
      int closest_depth = -2;
      for (const KernelConfig& kernel : built) {
        if (kernel.family != stage) continue;
        // The matrix has no KV-layout axis: a paged shape is an NHD or an HND pool alike, so
        // the kernel's layout is the one the row times (sweep_problems_paged.cpp builds it).
        Problem with_layout;
        if (problem.is_paged()) {
          with_layout = problem;
          with_layout.paged.layout = kernel.kv_layout;
        }
        // The dispatcher's rule, template limits included (e.g. a page size the kernel
        // cannot load).
        const auto refused = runtime::dispatch_rejection(
            kernel, problem.is_paged() ? with_layout : problem, stage, arch);
        const std::optional<std::string> why =
            refused ? std::optional<std::string>(refused->text) : std::nullopt;
        if (!why) {
          fits.push_back({&shape, "match", stage, kernel, ""});
          stage_served = true;
          continue;
        }
        if (const int depth = runtime::match_depth(*why); depth > closest_depth) {
          closest_depth = depth;
          closest.kernel = kernel;
          closest.reason = *why;
        }
      }
      if (!stage_served && !unserved) unserved = closest;
    }
    // A plan needs every stage, so one missing stage leaves the whole shape unserved.
    if (unserved)
      rows.push_back(*unserved);
    else
      rows.insert(rows.end(), fits.begin(), fits.end());
  }
  return rows;
}

json sweep_row_json(const SweepMatch& match) {
  const bench::MatrixShape& s = *match.shape;
  json out;
  out["tier"] = s.tier;
  out["group"] = s.group;
  out["shape"] = s.label();
  out["problem_family"] = to_string(s.family);
  out["problem_dtype"] = to_string(s.dtype);
  out["problem_out_dtype"] = to_string(s.out_dtype);
  out["problem_mode"] = to_string(s.mode());
  out["problem_batch"] = s.batch;
  out["problem_nhead_q"] = s.nhead_q;
  out["problem_nhead_k"] = s.nhead_k;
  out["problem_seqlen_q"] = s.seqlen_q;
  out["problem_seqlen_k"] = s.seqlen_k;
  out["problem_hdim_q"] = s.hdim_q;
  out["problem_hdim_v"] = s.hdim_v;
  out["problem_varlen"] = s.varlen.empty() ? json(nullptr) : json(lengths_text(s.varlen));
  out["problem_page_table"] = to_string(s.page_table);
  out["problem_page_size"] = s.page_size;
  out["problem_num_splits"] = s.num_splits;
  out["problem_seqlen_knew"] = s.seqlen_knew;
  out["problem_mask"] = to_string(s.mask);
  out["problem_bias"] = to_string(s.bias);
  out["problem_softcap"] = s.softcap;
  out["problem_dropout"] = s.dropout;
  out["problem_lse"] = s.lse;
  out["status"] = match.status;
  out["stage"] = to_string(match.stage);
  out["reason"] = match.reason;
  const bool matched = match.status == "match" && match.kernel;
  out["closest_kernel"] = !matched && match.kernel ? json(match.kernel->name()) : json(nullptr);
  out["kernel_name"] = matched ? json(match.kernel->name()) : json(nullptr);
  // Every identity field by the single field table, so a row rebuilds its KernelConfig.
  put_kernel_fields(out, matched ? &*match.kernel : nullptr);
  for (const char* column :
       {"median_ms", "tflops", "gbps", "card", "sm_clock_mhz", "memory_clock_mhz", "driver",
        "validated", "validation", "max_abs_error"})
    out[column] = nullptr;
  return out;
}

}  // namespace tilefmha::cli
