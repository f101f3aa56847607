// validate(): append-KV (new tokens, cache lengths) and its RoPE settings and tables.
#include <algorithm>

#include "core/validate_detail.hpp"

namespace tilefmha::validation {
namespace {

// The largest absolute RoPE position the problem rotates, plus one (0 when none).
// New key t of sequence b sits at key_length(b) + t; query i at key_length(b) + i.
int64_t positions_needed(const Problem& p, int64_t& worst_sequence) {
  int64_t needed = 0;
  worst_sequence = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t rotated = p.append.seqlen_knew;
    if (p.append.rotate_q) rotated = std::max(rotated, p.query_length(b));
    const int64_t end = rotated > 0 ? p.key_length(b) + rotated : 0;
    if (end > needed) {
      needed = end;
      worst_sequence = b;
    }
  }
  return needed;
}

void check_rope(const Problem& p) {
  const AppendKv& a = p.append;
  if (a.rope == RopeKind::none) {
    if (a.rotary_dim != 0)
      fail(cat("append.rotary_dim = ", a.rotary_dim, " set but append.rope = none"));
    forbid_view(a.rope_cos, "append.rope_cos", "append.rope = none");
    forbid_view(a.rope_sin, "append.rope_sin", "append.rope = none");
    if (a.rotate_q) fail("append.rotate_q = true needs append.rope != none");
    return;
  }
  if (a.rotary_dim < 2 || a.rotary_dim > p.hdim_q || a.rotary_dim % 2 != 0)
    fail(cat("append.rotary_dim = ", a.rotary_dim, " must be even and in [2, hdim_q = ", p.hdim_q,
             "]"));

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
    for (int64_t b = 0; b < p.batch; ++b)
      if (keys_to_hold(p, b) > view->shape[1])
        fail(cat(field, ".shape[1] = ", view->shape[1], " (cache capacity) cannot hold sequence ",
                 b, "'s seqlen_k_per_batch[", b, "] = ", p.key_length(b),
                 " cached + append.seqlen_knew = ", p.append.seqlen_knew, " new keys"));
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
    if (p.seqlen_k_per_batch.empty())
      fail(
          "seqlen_k_per_batch is empty but family fwd_appendkv needs the cache length of "
          "every sequence (where new tokens go)");
  }
  const auto check_new_tokens = [&](const TensorView& view, const char* field,
                                    const char* hdim_name, int64_t hdim) {
    const ViewRule rule{field,
                        {p.dtype},
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
  if (appends && !p.seqlen_k_per_batch.empty()) check_cache_capacity(p);
  check_rope(p);
}

}  // namespace tilefmha::validation
