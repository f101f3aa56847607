// validate(): the Q/K/V/O/LSE views, split-KV partials and backward tensors each family reads
// or writes, and the contiguous caches' room for every sequence's keys.
#include "core/validate_detail.hpp"

namespace tilefmha::validation {
namespace {

// What a family does with a view: nothing (then the view is optional), reads or writes it.
enum class Use { none, reads, writes };

struct FamilyUse {
  Use q = Use::none, k = Use::none, v = Use::none, o = Use::none;
};

FamilyUse main_use(const Problem& p) {
  switch (p.family) {
    case Family::fwd:
    case Family::fwd_pagedkv:
    case Family::batch_prefill: return {Use::reads, Use::reads, Use::reads, Use::writes};
    case Family::fwd_splitkv: return {Use::reads, Use::reads, Use::reads, Use::none};
    case Family::fwd_splitkv_combine: return {Use::none, Use::none, Use::none, Use::writes};
    case Family::fwd_appendkv:
      // With O set the problem attends after the append, reading Q (rotated first, when asked).
      if (appends_then_attends(p))
        return {p.append.rotate_q ? Use::writes : Use::reads, Use::writes, Use::writes,
                Use::writes};
      return {p.append.rotate_q ? Use::writes : Use::none, Use::writes, Use::writes, Use::none};
    case Family::bwd_dot_do_o: return {Use::none, Use::none, Use::none, Use::reads};
    case Family::bwd_dq_dk_dv: return {Use::reads, Use::reads, Use::reads, Use::none};
    case Family::bwd_convert_dq: return {};
  }
  return {};
}

std::string use_text(const Problem& p, Use use) {
  return cat("family ", to_string(p.family), use == Use::reads ? " reads it" : " writes it");
}

// Requires the view when the family uses it, else checks it only when present.
void check_used(const TensorView& view, ViewRule rule, const Problem& p, Use use) {
  rule.written = use == Use::writes;
  if (use == Use::none)
    check_view(view, rule);
  else
    require_view(view, rule, use_text(p, use));
}

// A [rows..., heads, dim] rule for token-major views.
ViewRule token_rule(std::string field, DType dtype, std::vector<DimRule> rows, DimRule heads,
                    DimRule dim) {
  rows.push_back(std::move(heads));
  rows.push_back(std::move(dim));
  return {std::move(field), {dtype}, std::move(rows)};
}

ViewRule query_rule(const Problem& p, std::string field, DType dtype) {
  return token_rule(std::move(field), dtype, query_rows(p), {"nhead_q", p.nhead_q},
                    {"hdim_q", p.hdim_q});
}

ViewRule output_rule(const Problem& p, std::string field) {
  return token_rule(std::move(field), p.out_dtype, query_rows(p), {"nhead_q", p.nhead_q},
                    {"hdim_v", p.hdim_v});
}

ViewRule key_rule(const Problem& p, std::string field, DType dtype, bool is_v) {
  const DimRule dim = is_v ? DimRule{"hdim_v", p.hdim_v} : DimRule{"hdim_q", p.hdim_q};
  std::vector<DimRule> rows = p.is_paged()
                                  ? std::vector<DimRule>{{"paged.num_pages", p.paged.num_pages},
                                                         {"paged.page_size", p.paged.page_size}}
                                  : key_rows(p);
  return token_rule(std::move(field), dtype, std::move(rows), {"nhead_k", p.nhead_k}, dim);
}

ViewRule split_rule(const Problem& p, std::string field, bool with_dim) {
  std::vector<DimRule> dims = {{"split.num_splits", p.split.num_splits}};
  const ViewRule lse = lse_rule(p, "");
  dims.insert(dims.end(), lse.shape.begin(), lse.shape.end());
  if (with_dim) dims.push_back({"hdim_v", p.hdim_v});
  std::vector<DType> dtypes = {DType::fp32};
  // The combine also merges finished 16-bit attention outputs (merge_states), whose partial O
  // has the problem's dtype; split kernels always write fp32.
  const bool sixteen_bit = p.dtype == DType::fp16 || p.dtype == DType::bf16;
  if (with_dim && p.family == Family::fwd_splitkv_combine && sixteen_bit) dtypes.push_back(p.dtype);
  return {std::move(field), std::move(dtypes), std::move(dims)};
}

// dSink is the gradient of the sink logits, written by the whole backward (bwd_dq_dk_dv, the
// family a GPU plans). The row-stage families describe one stage each and would not write it,
// so they refuse it rather than leave it unwritten.
void check_dsink(const Problem& p) {
  const TensorView& dsink = p.bwd.dsink;
  if (!present(dsink)) return;
  if (p.family != Family::bwd_dq_dk_dv)
    fail(cat("bwd.dsink is set (non-null data) but family = ", to_string(p.family),
             ": the sink logits' gradient is written by the backward, family bwd_dq_dk_dv"));
  if (!present(p.sink_logits))
    fail(
        "bwd.dsink is set (non-null data) but sink_logits is not: dsink is the gradient of the "
        "sink logits");
  check_view(dsink, {"bwd.dsink", {DType::fp32}, {{"nhead_q", p.nhead_q}}, true});
}

}  // namespace

void check_main_views(const Problem& p) {
  const FamilyUse use = main_use(p);
  check_used(p.q, query_rule(p, "q", p.dtype), p, use.q);
  check_used(p.k, key_rule(p, "k", p.dtype, false), p, use.k);
  check_used(p.v, key_rule(p, "v", p.dtype, true), p, use.v);
  check_used(p.o, output_rule(p, "o"), p, use.o);

  const ViewRule lse = lse_rule(p, "lse");
  if (!p.is_backward()) {
    // Forward families write LSE exactly when asked to.
    if (p.return_lse)
      require_view(p.lse, {lse.field, lse.dtypes, lse.shape, true}, "return_lse = true");
    else
      forbid_view(p.lse, "lse", "return_lse = false (set return_lse to have it written)");
  } else {
    check_used(p.lse, lse, p, p.family == Family::bwd_dq_dk_dv ? Use::reads : Use::none);
  }
}

void check_split(const Problem& p) {
  const bool explicit_partials =
      p.family == Family::fwd_splitkv || p.family == Family::fwd_splitkv_combine;
  if (p.split.num_splits < (explicit_partials ? 1 : 0))
    fail(cat("split.num_splits = ", p.split.num_splits,
             explicit_partials ? " must be at least 1 for family "
                               : " must be at least 0 (auto) for family ",
             to_string(p.family)));
  Use use = Use::none;
  if (p.family == Family::fwd_splitkv) use = Use::writes;
  if (p.family == Family::fwd_splitkv_combine) use = Use::reads;
  check_used(p.split.o_acc, split_rule(p, "split.o_acc", true), p, use);
  check_used(p.split.lse_acc, split_rule(p, "split.lse_acc", false), p, use);
}

void check_backward_views(const Problem& p) {
  check_dsink(p);
  const Backward& g = p.bwd;
  const Family f = p.family;
  const auto use_if = [](bool used, Use use) { return used ? use : Use::none; };
  check_used(g.d_o, output_rule(p, "bwd.d_o"), p,
             use_if(f == Family::bwd_dot_do_o || f == Family::bwd_dq_dk_dv, Use::reads));
  // bwd_dq_dk_dv is the whole backward's family: a GPU plan keeps D and the dQ accumulator in
  // its workspace when the caller brings none, so there they are checked only when present (the
  // CPU reference requires them: reference::detail::require_backward_supported).
  ViewRule d_rule = lse_rule(p, "bwd.d");
  ViewRule acc_rule = query_rule(p, "bwd.dq_acc", DType::fp32);
  if (f == Family::bwd_dq_dk_dv) {
    acc_rule.written = true;
    check_view(g.d, d_rule);
    check_view(g.dq_acc, acc_rule);
  } else {
    check_used(g.d, d_rule, p, f == Family::bwd_dot_do_o ? Use::writes : Use::none);
    check_used(g.dq_acc, acc_rule, p, f == Family::bwd_convert_dq ? Use::reads : Use::none);
  }
  check_used(g.dq, query_rule(p, "bwd.dq", p.out_dtype), p,
             use_if(f == Family::bwd_convert_dq, Use::writes));
  // Gradients of a paged cache are not defined; backward families reject paging earlier.
  if (!p.is_paged()) {
    check_used(g.dk, key_rule(p, "bwd.dk", p.out_dtype, false), p,
               use_if(f == Family::bwd_dq_dk_dv, Use::writes));
    check_used(g.dv, key_rule(p, "bwd.dv", p.out_dtype, true), p,
               use_if(f == Family::bwd_dq_dk_dv, Use::writes));
  }
  if (present(g.dbias)) {
    if (p.bias_kind != BiasKind::elementwise)
      fail(cat("bwd.dbias is set (non-null data) but bias_kind = ", to_string(p.bias_kind),
               " (a bias gradient needs bias_kind = elementwise)"));
    // dBias takes the bias's broadcast: gradients sum over the broadcast dimensions.
    check_view(g.dbias, {"bwd.dbias", float_dtypes(), score_dims(p), true, true});
    for (int d = 0; d < g.dbias.rank; ++d)
      if ((g.dbias.stride[d] == 0) != (p.bias.stride[d] == 0) && p.bias.shape[d] > 1)
        fail(cat("bwd.dbias.stride[", d, "] = ", g.dbias.stride[d], " but bias.stride[", d,
                 "] = ", p.bias.stride[d], ": dbias must broadcast exactly where bias does"));
  }
}

void check_key_capacity(const Problem& p) {
  if (p.is_paged() || p.mode != Mode::group || p.seqlen_k_per_batch.empty()) return;
  // Group mode caches: sequence b owns rows [seqstart_k[b], seqstart_k[b + 1]) of K/V.
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t span = p.seqstart_k[b + 1] - p.seqstart_k[b];
    const int64_t keys = keys_to_hold(p, b);
    if (keys > span) {
      const std::string appended = p.family == Family::fwd_appendkv
                                       ? cat(" + append.seqlen_knew = ", p.append.seqlen_knew)
                                       : std::string();
      fail(cat("seqlen_k_per_batch[", b, "] = ", p.seqlen_k_per_batch[b], appended,
               " exceeds sequence ", b, "'s K span seqstart_k[", b + 1, "] - seqstart_k[", b,
               "] = ", span));
    }
  }
}

}  // namespace tilefmha::validation
