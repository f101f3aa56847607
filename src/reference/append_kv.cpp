// fwd_appendkv: new K/V tokens into the cache (contiguous or paged), RoPE on new K and, when
// asked, on Q in place. Rotated values are loaded as double, rotated, and stored rounded to the
// dtype (numeric::store: round to nearest even; fp8 saturating, as the GPU's cvt.rn.satfinite).
// Every other element (V, K without RoPE, dims past rotary_dim) is copied as stored, byte for
// byte: an append re-encodes nothing it does not rotate (an e5m2 infinity stays one, a NaN keeps
// its payload), which is what the GPU kernel does too.
#include <algorithm>
#include <cmath>
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
  // new tokens, cache and Q share one scale: per-tensor fp8 scales work, finer ones do not,
  // except per-page ones set by the append itself from 16-bit new tokens (quantizes_append).
  if (p.fp8.kind == Fp8ScaleKind::per_block ||
      (p.fp8.kind == Fp8ScaleKind::per_page && !quantizes_append(p)))
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

// A quantizing append (quantizes_append) of K (rotated first) or V of sequence b, KV head hk:
// page by page, the page's scale from its new values (quantized_page_scale), its held codes
// re-encoded where the scale grows, then the new values as codes at that scale.
void quantize_head(const Problem& p, int64_t b, int64_t hk, bool key) {
  const AppendKv& a = p.append;
  const TensorView& source = key ? a.k_new : a.v_new;
  const TensorView& cache = key ? p.k : p.v;
  const TensorView& scales = key ? p.fp8.k_page : p.fp8.v_page;
  const char* scale_field = key ? "fp8.k_page" : "fp8.v_page";
  const int64_t dim = key ? p.hdim_q : p.hdim_v, held_keys = p.key_length(b);
  const int64_t page_size = p.paged.page_size, end_keys = held_keys + a.seqlen_knew;
  std::vector<std::vector<double>> rows(static_cast<size_t>(a.seqlen_knew),
                                        std::vector<double>(static_cast<size_t>(dim)));
  for (int64_t t = 0; t < a.seqlen_knew; ++t) {
    auto& row = rows[static_cast<size_t>(t)];
    load_row(source, source.offset({b, t, hk, 0}), row);
    if (key) detail::apply_rope(a, held_keys + t + a.position_offset(b), row.data());
  }
  const auto element = [&](int64_t row_base, int64_t d) { return row_base + d * cache.stride[3]; };
  for (int64_t first_key = held_keys / page_size * page_size; first_key < end_keys;
       first_key += page_size) {
    const int64_t begin = std::max(first_key, held_keys);
    const int64_t end = std::min(first_key + page_size, end_keys);
    float amax = 0.0f;  // over finite values: infinities saturate, NaNs stay NaN
    for (int64_t j = begin; j < end; ++j)
      for (double x : rows[static_cast<size_t>(j - held_keys)])
        if (std::isfinite(x)) amax = std::max(amax, static_cast<float>(std::fabs(x)));
    const int64_t page = p.page_slot(b, first_key).page;
    const int64_t entry = scales.offset({page, hk});
    const bool held = held_keys > first_key;
    const auto old = static_cast<float>(numeric::load(scales.data, DType::fp32, entry));
    if (held && !(old > 0.0f && std::isfinite(old)))
      throw Error(ErrorKind::invalid_problem,
                  std::string(scale_field) + "[" + std::to_string(page) + ", " +
                      std::to_string(hk) + "] = " + std::to_string(old) +
                      ": the page holds keys, so its scale must be positive and finite");
    const float scale = quantized_page_scale(p.dtype, held, old, amax);
    if (held && scale != old) {
      for (int64_t j = first_key; j < held_keys; ++j) {
        const int64_t base = cache_row(p, cache, b, j, hk);
        for (int64_t d = 0; d < dim; ++d)
          numeric::store(cache.data, cache.dtype, element(base, d),
                         numeric::load(cache.data, cache.dtype, element(base, d)) * old / scale);
      }
    }
    for (int64_t j = begin; j < end; ++j) {
      const int64_t base = cache_row(p, cache, b, j, hk);
      const auto& row = rows[static_cast<size_t>(j - held_keys)];
      for (int64_t d = 0; d < dim; ++d)
        numeric::store(cache.data, cache.dtype, element(base, d),
                       row[static_cast<size_t>(d)] / scale);
    }
    numeric::store(scales.data, DType::fp32, entry, scale);
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
  if (quantizes_append(p)) {
    parallel_for(2 * p.batch * p.nhead_k, [&](int64_t task) {
      quantize_head(p, task / 2 / p.nhead_k, task / 2 % p.nhead_k, task % 2 == 0);
    });
    return;  // validation refuses rotate_q with a quantizing append
  }
  parallel_for(p.batch * p.nhead_k,
               [&](int64_t task) { append_kv_head(p, task / p.nhead_k, task % p.nhead_k); });
  if (p.append.rotate_q && p.append.rope != RopeKind::none)
    parallel_for(p.batch * p.nhead_q,
                 [&](int64_t task) { rotate_q_head(p, task / p.nhead_q, task % p.nhead_q); });
}

}  // namespace tilefmha::reference
