// validate(): append-KV (new tokens, cache lengths) and its RoPE settings and tables.
#include <algorithm>
#include <cmath>

#include "core/validate_detail.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::validation {
namespace {

// The largest absolute RoPE position the problem rotates, plus one (0 when none).
// New key t of sequence b sits at key_length(b) + t + position_offset(b); query i at
// key_length(b) + i + position_offset(b). (Device lengths: key_length is their bound seqlen_k.)
int64_t positions_needed(const Problem& p, int64_t& worst_sequence) {
  int64_t needed = 0;
  worst_sequence = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t rotated = p.append.seqlen_knew;
    if (p.append.rotate_q) rotated = std::max(rotated, p.query_length(b));
    const int64_t end = rotated > 0 ? p.key_length(b) + p.append.position_offset(b) + rotated : 0;
    if (end > needed) {
      needed = end;
      worst_sequence = b;
    }
  }
  return needed;
}

void check_position_offsets(const Problem& p) {
  const AppendKv& a = p.append;
  if (p.device_indices.rope_position_offsets != nullptr) {
    if (!a.rope_position_offsets.empty())
      fail(
          "append.rope_position_offsets and device_indices.rope_position_offsets are both set; "
          "pass the offsets on the host or on the device");
    if (a.rope == RopeKind::none || !(a.rope_theta > 0))
      fail(
          "device_indices.rope_position_offsets needs append.rope_theta > 0: RoPE tables cannot "
          "be checked against positions the host cannot read");
  }
  if (a.rope_position_offsets.empty()) return;
  if (a.rope == RopeKind::none)
    fail(cat("append.rope_position_offsets has ", a.rope_position_offsets.size(),
             " entries but append.rope = none (offsets only move RoPE positions)"));
  if (static_cast<int64_t>(a.rope_position_offsets.size()) != p.batch)
    fail(cat("append.rope_position_offsets has ", a.rope_position_offsets.size(),
             " entries but batch = ", p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    // The first rotated position of sequence b; with device lengths only the offset is known.
    const int64_t cached = p.seqlen_k_per_batch.empty() ? 0 : p.key_length(b);
    if (cached + a.position_offset(b) < 0)
      fail(cat("append.rope_position_offsets[", b, "] = ", a.position_offset(b), " puts sequence ",
               b, "'s first RoPE position at ", cached + a.position_offset(b), " (negative)"));
  }
}

void check_rope(const Problem& p) {
  const AppendKv& a = p.append;
  if (a.rope == RopeKind::none) {
    if (a.rotary_dim != 0)
      fail(cat("append.rotary_dim = ", a.rotary_dim, " set but append.rope = none"));
    forbid_view(a.rope_cos, "append.rope_cos", "append.rope = none");
    forbid_view(a.rope_sin, "append.rope_sin", "append.rope = none");
    if (a.rotate_q) fail("append.rotate_q = true needs append.rope != none");
    if (a.rope_theta != 0)
      fail(cat("append.rope_theta = ", number(a.rope_theta), " set but append.rope = none"));
    check_position_offsets(p);
    return;
  }
  if (a.rotary_dim < 2 || a.rotary_dim > p.hdim_q || a.rotary_dim % 2 != 0)
    fail(cat("append.rotary_dim = ", a.rotary_dim, " must be even and in [2, hdim_q = ", p.hdim_q,
             "]"));

  check_position_offsets(p);
  if (!(a.rope_theta >= 0) || std::isinf(a.rope_theta))
    fail(cat("append.rope_theta = ", number(a.rope_theta),
             " must be finite and > 0 (computed angles), or 0 (tables)"));
  if (a.rope_theta > 0) {
    const std::string why = cat("append.rope_theta = ", number(a.rope_theta),
                                " computes the angles (pass tables or a base, not both)");
    forbid_view(a.rope_cos, "append.rope_cos", why);
    forbid_view(a.rope_sin, "append.rope_sin", why);
    return;
  }
  const bool appends = p.family == Family::fwd_appendkv;
  int64_t worst = 0;
  const int64_t positions = positions_needed(p, worst);
  const std::string why = cat("append.rope = ", to_string(a.rope), " reads it");
  for (const auto& [view, field] :
       {std::pair{&a.rope_cos, "append.rope_cos"}, std::pair{&a.rope_sin, "append.rope_sin"}}) {
    const ViewRule rule{
        field, {DType::fp32}, {{"max_position", 0, true}, {"rotary_dim / 2", a.rotary_dim / 2}}};
    if (!appends) {
      check_view(*view, rule);
      continue;
    }
    require_view(*view, rule, why);
    if (view->shape[0] < positions)
      fail(cat(field, ".shape[0] = ", view->shape[0], " positions but sequence ", worst,
               " rotates position ", positions - 1, " (key length ", p.key_length(worst),
               a.position_offset(worst) != 0
                   ? cat(", RoPE position offset ", a.position_offset(worst))
                   : std::string(),
               ", append.seqlen_knew ", a.seqlen_knew,
               a.rotate_q ? cat(", query length ", p.query_length(worst)) : std::string(), ")"));
  }
}

// The contiguous cache must hold every sequence's cached and new keys. Checked before the RoPE
// tables: tables sized to the cache capacity also fall short when the append overflows it, and
// the capacity, not the tables, is what is wrong then.
void check_cache_capacity(const Problem& p) {
  if (p.is_paged()) return;  // check_page_table checked the pages' room already
  if (p.mode == Mode::group) return check_key_capacity(p);
  for (const auto& [view, field] : {std::pair{&p.k, "k"}, std::pair{&p.v, "v"}}) {
    if (!present(*view) || view->rank != 4) continue;  // check_main_views names these
    for (int64_t b = 0; b < p.batch; ++b) {
      if (keys_to_hold(p, b) <= view->shape[1]) continue;
      // Device lengths cannot be read here: their bound seqlen_k stands for every sequence.
      const std::string cached =
          p.seqlen_k_per_batch.empty()
              ? cat("seqlen_k = ", p.seqlen_k, " (the bound of the device key lengths)")
              : cat("sequence ", b, "'s seqlen_k_per_batch[", b, "] = ", p.key_length(b));
      fail(cat(field, ".shape[1] = ", view->shape[1], " (cache capacity) cannot hold ", cached,
               " cached + append.seqlen_knew = ", p.append.seqlen_knew, " new keys"));
    }
  }
}

}  // namespace

void check_append(const Problem& p) {
  const AppendKv& a = p.append;
  const bool appends = p.family == Family::fwd_appendkv;
  if (appends) {
    if (a.seqlen_knew < 1)
      fail(cat("append.seqlen_knew = ", a.seqlen_knew,
               " but family fwd_appendkv appends at least 1 token"));
    if (!p.has_key_lengths())
      fail(
          "seqlen_k_per_batch is empty but family fwd_appendkv needs the cache length of "
          "every sequence (where new tokens go), on the host or the device");
  }
  // A quantizing append (fp8 per-page cache) takes 16-bit new tokens, K and V alike; any other
  // append takes the cache's dtype.
  const bool quantizes = quantizes_append(p);
  const std::vector<DType> new_dtypes =
      quantizes ? std::vector<DType>{DType::fp16, DType::bf16} : std::vector<DType>{p.dtype};
  const auto check_new_tokens = [&](const TensorView& view, const char* field,
                                    const char* hdim_name, int64_t hdim) {
    const ViewRule rule{field,
                        new_dtypes,
                        {{"batch", p.batch},
                         {"append.seqlen_knew", a.seqlen_knew},
                         {"nhead_k", p.nhead_k},
                         {hdim_name, hdim}}};
    if (appends)
      require_view(view, rule, "family fwd_appendkv reads it");
    else
      check_view(view, rule);
  };
  check_new_tokens(a.k_new, "append.k_new", "hdim_q", p.hdim_q);
  check_new_tokens(a.v_new, "append.v_new", "hdim_v", p.hdim_v);
  if (appends) check_cache_capacity(p);
  if (quantizes && a.k_new.dtype != a.v_new.dtype)
    fail(cat("append.v_new has dtype ", to_string(a.v_new.dtype), " but append.k_new ",
             to_string(a.k_new.dtype), ": a quantizing append takes both in one 16-bit dtype"));
  if (quantizes && a.rotate_q)
    fail(cat("append.rotate_q = true with a quantizing append (dtype ", to_string(p.dtype),
             ", fp8.kind = per_page, 16-bit new tokens): not supported; rotate Q in its own "
             "dtype before the call"));
  check_rope(p);
}

// With O set, the attention over the appended cache must itself be a valid problem; its errors
// say so, since their field names are the attention's (e.g. key counts after the append).
void check_append_chain(const Problem& p) {
  if (!appends_then_attends(p)) return;
  if (quantizes_append(p))
    fail(cat("o is set, so the problem attends after the append, but a quantizing append (dtype ",
             to_string(p.dtype),
             ", fp8.kind = per_page, 16-bit new tokens) does not chain an attention: run the "
             "attention over the updated cache and scales as its own problem"));
  if (p.mode != Mode::batch)
    fail("mode = group: append then attend (fwd_appendkv with o) runs in batch mode only");
  try {
    validate(attention_after_append(p));
  } catch (const Error& error) {
    fail(cat("o is set, so the problem attends after the append, but that attention is invalid: ",
             error.what()));
  }
}

}  // namespace tilefmha::validation
