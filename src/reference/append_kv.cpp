// fwd_appendkv: new K/V tokens into the cache (contiguous or paged), RoPE on new K and, when
// asked, on Q in place. Rotated values are loaded as double, rotated, and stored rounded to the
// dtype (numeric::store: round to nearest even; fp8 saturating, as the GPU's cvt.rn.satfinite).
// Every other element (V, K without RoPE, dims past rotary_dim) is copied as stored, byte for
// byte: an append re-encodes nothing it does not rotate (an e5m2 infinity stays one, a NaN keeps
// its payload), which is what the GPU kernel does too.
#include <cstring>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "reference/access.hpp"
#include "reference/rope.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha::reference {
namespace {

void load_row(const TensorView& view, int64_t base, std::vector<double>& row) {
  for (size_t d = 0; d < row.size(); ++d)
    row[d] = numeric::load(view.data, view.dtype, base + static_cast<int64_t>(d) * view.stride[3]);
}

// Stores the first `count` values of `row`.
void store_row(const TensorView& view, int64_t base, const std::vector<double>& row,
               int64_t count) {
  for (int64_t d = 0; d < count; ++d)
    numeric::store(view.data, view.dtype, base + d * view.stride[3], row[d]);
}

// Copies elements [first, count) of a row as stored (validation gives the new tokens the
// cache's dtype).
void copy_row(const TensorView& from, int64_t from_base, const TensorView& to, int64_t to_base,
              int64_t first, int64_t count) {
  const int64_t bytes = dtype_size(to.dtype);
  const auto* source = static_cast<const unsigned char*>(from.data);
  auto* target = static_cast<unsigned char*>(to.data);
  for (int64_t d = first; d < count; ++d)
    std::memcpy(target + (to_base + d * to.stride[3]) * bytes,
                source + (from_base + d * from.stride[3]) * bytes, bytes);
}

// The leading dims RoPE rotates (none without RoPE).
int64_t rotated_dims(const AppendKv& a) {
  return a.rope == RopeKind::none ? 0 : a.rotary_dim;
}

// Offset of cache row (key `position` of sequence b, KV head hk) in a K or V cache view.
int64_t cache_row(const Problem& p, const TensorView& cache, int64_t b, int64_t position,
                  int64_t hk) {
  if (p.is_paged()) {
    const auto [page, slot] = p.page_slot(b, position);
    return cache.offset({page, slot, hk, 0});
  }
  const detail::RowIndex row = detail::key_row(p, b, position);
  return cache.offset({row.batch, row.seq, hk, 0});
}

void require_supported(const Problem& p) {
  // Rotation is linear, so rotating stored values equals rotating dequantized ones only when
  // new tokens, cache and Q share one scale: per-tensor fp8 scales work, finer ones do not.
  if (p.fp8.kind == Fp8ScaleKind::per_block || p.fp8.kind == Fp8ScaleKind::per_page)
    throw Error(ErrorKind::not_supported,
                "append-KV with fp8.kind = " + std::string(to_string(p.fp8.kind)) +
                    " is not supported (per_tensor or none only)");
  const auto require = [](const TensorView& view, const char* field) {
    if (view.empty())
      throw Error(ErrorKind::invalid_problem,
                  std::string(field) + " is not set (needed by fwd_appendkv)");
    if (view.space != MemorySpace::host)
      throw Error(ErrorKind::invalid_problem,
                  std::string(field) + " is in device memory; the CPU reference needs host memory");
  };
  require(p.k, "k");
  require(p.v, "v");
  require(p.append.k_new, "append.k_new");
  require(p.append.v_new, "append.v_new");
  if (p.append.rope != RopeKind::none && p.append.rope_theta <= 0) {
    require(p.append.rope_cos, "append.rope_cos");
    require(p.append.rope_sin, "append.rope_sin");
  }
  if (p.append.rotate_q || appends_then_attends(p)) require(p.q, "q");
}

void append_kv_head(const Problem& p, int64_t b, int64_t hk) {
  const AppendKv& a = p.append;
  const int64_t rotated = rotated_dims(a);
  std::vector<double> k_row(p.hdim_q);
  for (int64_t t = 0; t < a.seqlen_knew; ++t) {
    const int64_t position = p.key_length(b) + t;
    const int64_t k_new = a.k_new.offset({b, t, hk, 0});
    const int64_t k_cache = cache_row(p, p.k, b, position, hk);
    load_row(a.k_new, k_new, k_row);
    detail::apply_rope(a, position + a.position_offset(b), k_row.data());
    store_row(p.k, k_cache, k_row, rotated);
    copy_row(a.k_new, k_new, p.k, k_cache, rotated, p.hdim_q);
    copy_row(a.v_new, a.v_new.offset({b, t, hk, 0}), p.v, cache_row(p, p.v, b, position, hk), 0,
             p.hdim_v);
  }
}

// Q rotates in place: only its first rotary_dim values change.
void rotate_q_head(const Problem& p, int64_t b, int64_t h) {
  std::vector<double> row(p.hdim_q);
  for (int64_t i = 0; i < p.query_length(b); ++i) {
    const detail::RowIndex index = detail::query_row(p, b, i);
    const int64_t base = p.q.offset({index.batch, index.seq, h, 0});
    load_row(p.q, base, row);
    detail::apply_rope(p.append, p.key_length(b) + i + p.append.position_offset(b), row.data());
    store_row(p.q, base, row, rotated_dims(p.append));
  }
}

}  // namespace

void append_kv(const Problem& problem) {
  validate(problem);
  require_supported(problem);
  const Problem& p = problem;
  // Distinct (sequence, position) pairs map to distinct cache rows (validation rejects page
  // tables that alias), so per-(batch, KV head) tasks never write the same element.
  parallel_for(p.batch * p.nhead_k,
               [&](int64_t task) { append_kv_head(p, task / p.nhead_k, task % p.nhead_k); });
  if (p.append.rotate_q && p.append.rope != RopeKind::none)
    parallel_for(p.batch * p.nhead_q,
                 [&](int64_t task) { rotate_q_head(p, task / p.nhead_q, task % p.nhead_q); });
}

}  // namespace tilefmha::reference
