// validate(): the logit features (scale, soft cap, mask, bias, ALiBi, sink logit), accumulation
// into the output, dropout and the fp8 descale factors.
#include <cmath>

#include "core/numeric.hpp"
#include "core/validate_detail.hpp"

namespace tilefmha::validation {
namespace {

// Families whose kernels read Q/K/V rows for attention (and so dequantize fp8 inputs).
bool reads_attention_inputs(Family family) {
  switch (family) {
    case Family::fwd:
    case Family::fwd_splitkv:
    case Family::fwd_pagedkv:
    case Family::batch_prefill:
    case Family::bwd_dq_dk_dv: return true;
    default: return false;
  }
}

void check_mask(const MaskSpec& m) {
  const std::string kind = cat("mask.kind = ", to_string(m.kind));
  if (m.sink_tokens < 0) fail(cat("mask.sink_tokens = ", m.sink_tokens, " is negative"));
  switch (m.kind) {
    case MaskKind::none:
      if (m.window_left != -1)
        fail(cat("mask.window_left = ", m.window_left, " set on a problem with ", kind));
      if (m.window_right != -1)
        fail(cat("mask.window_right = ", m.window_right, " set on a problem with ", kind));
      if (m.sink_tokens != 0)
        fail(cat("mask.sink_tokens = ", m.sink_tokens, " set on a problem with ", kind,
                 " (sink tokens only matter under a mask)"));
      return;
    case MaskKind::causal:
      if (m.window_left != -1 || m.window_right != 0)
        fail(cat("mask.window_left = ", m.window_left, ", mask.window_right = ", m.window_right,
                 " but ", kind, " means the window (-1, 0)"));
      return;
    case MaskKind::window:
      if (m.window_left < -1)
        fail(cat("mask.window_left = ", m.window_left, " is below -1 (-1 = unbounded)"));
      if (m.window_right < -1)
        fail(cat("mask.window_right = ", m.window_right, " is below -1 (-1 = unbounded)"));
      return;
  }
}

void check_bias(const Problem& p) {
  const std::string kind = cat("bias_kind = ", to_string(p.bias_kind));
  if (p.bias_kind == BiasKind::elementwise)
    require_view(p.bias, {"bias", float_dtypes(), score_dims(p), false, true}, kind + " reads it");
  else
    forbid_view(p.bias, "bias", kind + " (an elementwise bias needs bias_kind = elementwise)");

  if (p.bias_kind == BiasKind::alibi) {
    // Slopes are per head, or per sequence and head.
    const bool per_sequence = p.alibi_slopes.rank == 2;
    std::vector<DimRule> dims = {{"nhead_q", p.nhead_q}};
    if (per_sequence) dims.insert(dims.begin(), {"batch", p.batch});
    require_view(p.alibi_slopes, {"alibi_slopes", {DType::fp32}, dims}, kind + " reads it");
  } else {
    forbid_view(p.alibi_slopes, "alibi_slopes", kind + " (ALiBi needs bias_kind = alibi)");
  }
}

void check_scale_factor(double value, std::string_view field) {
  if (!std::isfinite(value) || value <= 0)
    fail(cat(field, " = ", number(value), " must be finite and > 0"));
}

void check_block_scale(const Problem& p, const TensorView& view, std::string field, bool required,
                       std::string heads_name, int64_t heads, std::string seq_name,
                       int64_t seqlen) {
  const int64_t blocks = (seqlen + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const ViewRule rule{field,
                      {DType::fp32},
                      {{"batch", p.batch},
                       {std::move(heads_name), heads},
                       {cat("ceil(", seq_name, " / ", kFp8ScaleBlock, ")"), blocks}}};
  if (required)
    require_view(
        view, rule,
        cat("fp8.kind = per_block and family ", to_string(p.family), " dequantizes with it"));
  else
    check_view(view, rule);
}

// A non-finite sink logit has no meaning (+inf swallows every key, NaN poisons every row), so
// host values are refused here. Device values are not read on the host: planning a GPU problem
// must not synchronize, so the caller vouches for them.
void check_sink_values(const TensorView& sinks) {
  if (!present(sinks) || sinks.space != MemorySpace::host) return;
  for (int64_t h = 0; h < sinks.shape[0]; ++h) {
    const double value = numeric::load(sinks, {h});
    if (!std::isfinite(value))
      fail(cat("sink_logits[", h, "] = ", number(value), " must be finite"));
  }
}

}  // namespace

void check_logits(const Problem& p) {
  if (p.softmax_scale && (!std::isfinite(*p.softmax_scale) || *p.softmax_scale == 0))
    fail(cat("softmax_scale = ", number(*p.softmax_scale), " must be finite and non-zero"));
  if (!std::isfinite(p.softcap) || p.softcap < 0)
    fail(cat("softcap = ", number(p.softcap), " must be finite and >= 0 (0 = off)"));
  check_mask(p.mask);
  check_bias(p);
  check_view(p.sink_logits, {"sink_logits", {DType::fp32}, {{"nhead_q", p.nhead_q}}});
  check_sink_values(p.sink_logits);
}

void check_accumulate(const Problem& p) {
  if (!p.accumulate) return;
  if (p.family != Family::fwd)
    fail(cat("accumulate = true needs family fwd, but family = ", to_string(p.family)));
  if (is_fp8(p.dtype))
    fail(cat("accumulate = true needs fp16 or bf16 inputs, but dtype = ", to_string(p.dtype)));
  if (present(p.sink_logits))
    fail(
        "accumulate = true with sink_logits: the sink logit must join the denominator once; "
        "merge the states with merge_states(sink_logits=...) instead");
  if (p.split.num_splits > 1)
    fail(cat("accumulate = true runs in one pass, but split.num_splits = ", p.split.num_splits,
             " asks for split-KV"));
  if (!p.return_lse)
    fail("accumulate = true needs lse: the LSE it holds weighs the state already in O (set lse)");
}

void check_dropout(const Problem& p) {
  const double rate = p.dropout.p;
  if (!std::isfinite(rate) || rate < 0 || rate >= 1)
    fail(cat("dropout.p = ", number(rate), " is outside [0, 1)"));
  if (rate == 0)
    forbid_view(p.dropout.random_values, "dropout.random_values",
                "dropout.p = 0 (no dropout, so no random values to store)");
  check_view(p.dropout.random_values,
             {"dropout.random_values", {DType::uint8}, score_dims(p), true});
}

void check_fp8(const Problem& p) {
  const Fp8Scales& s = p.fp8;
  const std::string kind = cat("fp8.kind = ", to_string(s.kind));
  if (is_fp8(p.dtype) && s.kind == Fp8ScaleKind::none)
    fail(cat("fp8 dtype ", to_string(p.dtype),
             " needs fp8.kind != none (fp8 inputs are dequantized by descale factors)"));
  if (!is_fp8(p.dtype) && s.kind != Fp8ScaleKind::none)
    fail(cat(kind, " needs an fp8 dtype, but dtype = ", to_string(p.dtype)));
  if (s.kind == Fp8ScaleKind::per_page && !p.is_paged())
    fail(cat(kind, " needs a paged KV cache, but paged.table = none"));

  if (s.kind != Fp8ScaleKind::none) {
    check_scale_factor(s.q_descale, "fp8.q_descale");
    check_scale_factor(s.k_descale, "fp8.k_descale");
    check_scale_factor(s.v_descale, "fp8.v_descale");
  }

  const bool reads = reads_attention_inputs(p.family);
  if (s.kind == Fp8ScaleKind::per_block) {
    check_block_scale(p, s.q_block, "fp8.q_block", reads, "nhead_q", p.nhead_q, "seqlen_q",
                      p.seqlen_q);
    check_block_scale(p, s.k_block, "fp8.k_block", reads, "nhead_k", p.nhead_k, "seqlen_k",
                      p.seqlen_k);
    check_block_scale(p, s.v_block, "fp8.v_block", reads, "nhead_k", p.nhead_k, "seqlen_k",
                      p.seqlen_k);
  } else {
    forbid_view(s.q_block, "fp8.q_block", kind);
    forbid_view(s.k_block, "fp8.k_block", kind);
    forbid_view(s.v_block, "fp8.v_block", kind);
  }

  if (s.kind == Fp8ScaleKind::per_page) {
    const std::vector<DimRule> dims = {{"paged.num_pages", p.paged.num_pages},
                                       {"nhead_k", p.nhead_k}};
    const bool quantizes = quantizes_append(p);
    const std::string why =
        quantizes
            ? cat(kind, " and family fwd_appendkv: the append sets each page's scale in it")
            : cat(kind, " and family ", to_string(p.family), " dequantizes the cache with it");
    for (const auto& [view, field] :
         {std::pair{&s.k_page, "fp8.k_page"}, std::pair{&s.v_page, "fp8.v_page"}}) {
      const ViewRule rule{field, {DType::fp32}, dims, quantizes};
      if (reads || quantizes)
        require_view(*view, rule, why);
      else
        check_view(*view, rule);
    }
  } else {
    forbid_view(s.k_page, "fp8.k_page", kind);
    forbid_view(s.v_page, "fp8.v_page", kind);
  }
}

}  // namespace tilefmha::validation
