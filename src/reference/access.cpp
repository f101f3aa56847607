#include "reference/access.hpp"

#include <cmath>

#include "common/philox.h"
#include "core/numeric.hpp"

namespace tilefmha::reference::detail {
namespace {

// Scale of token t (local) of a per-block fp8 scale view [batch, heads, blocks].
double block_scale(const TensorView& scales, int64_t b, int64_t h, int64_t t) {
  return numeric::load(scales, {b, h, t / kFp8ScaleBlock});
}

double q_scale(const Problem& p, int64_t b, int64_t h, int64_t i) {
  switch (p.fp8.kind) {
    case Fp8ScaleKind::per_block: return block_scale(p.fp8.q_block, b, h, i);
    case Fp8ScaleKind::per_tensor:
    case Fp8ScaleKind::per_page: return p.fp8.q_descale;
    case Fp8ScaleKind::none: return 1.0;
  }
  return 1.0;
}

Rows gather_kv(const Problem& p, const TensorView& view, int64_t dim, int64_t b, int64_t hk,
               bool is_k) {
  Rows rows;
  rows.length = p.key_length(b);
  rows.dim = dim;
  rows.values.resize(rows.length * dim);
  for (int64_t j = 0; j < rows.length; ++j) {
    int64_t base;
    double scale = 1.0;
    if (p.is_paged()) {
      const auto [page, slot] = p.page_slot(b, j);
      base = view.offset({page, slot, hk, 0});
      if (p.fp8.kind == Fp8ScaleKind::per_page)
        scale = numeric::load(is_k ? p.fp8.k_page : p.fp8.v_page, {page, hk});
    } else {
      const RowIndex row = key_row(p, b, j);
      base = view.offset({row.batch, row.seq, hk, 0});
    }
    if (p.fp8.kind == Fp8ScaleKind::per_tensor) scale = is_k ? p.fp8.k_descale : p.fp8.v_descale;
    if (p.fp8.kind == Fp8ScaleKind::per_block)
      scale = block_scale(is_k ? p.fp8.k_block : p.fp8.v_block, b, hk, j);
    for (int64_t d = 0; d < dim; ++d)
      rows.values[j * dim + d] =
          numeric::load(view.data, view.dtype, base + d * view.stride[3]) * scale;
  }
  return rows;
}

}  // namespace

RowIndex query_row(const Problem& p, int64_t b, int64_t i) {
  return p.mode == Mode::group ? RowIndex{0, p.query_start(b) + i} : RowIndex{b, i};
}

RowIndex key_row(const Problem& p, int64_t b, int64_t j) {
  return p.mode == Mode::group ? RowIndex{0, p.key_start(b) + j} : RowIndex{b, j};
}

int64_t lse_offset(const Problem& p, const TensorView& view, int64_t b, int64_t h, int64_t i) {
  const RowIndex row = query_row(p, b, i);
  return view.offset({row.batch, h, row.seq});
}

Rows gather_q(const Problem& p, int64_t b, int64_t h) {
  Rows rows;
  rows.length = p.query_length(b);
  rows.dim = p.hdim_q;
  rows.values.resize(rows.length * rows.dim);
  for (int64_t i = 0; i < rows.length; ++i) {
    const RowIndex row = query_row(p, b, i);
    const int64_t base = p.q.offset({row.batch, row.seq, h, 0});
    const double scale = q_scale(p, b, h, i);
    for (int64_t d = 0; d < rows.dim; ++d)
      rows.values[i * rows.dim + d] =
          numeric::load(p.q.data, p.q.dtype, base + d * p.q.stride[3]) * scale;
  }
  return rows;
}

Rows gather_k(const Problem& p, int64_t b, int64_t hk) {
  return gather_kv(p, p.k, p.hdim_q, b, hk, true);
}

Rows gather_v(const Problem& p, int64_t b, int64_t hk) {
  return gather_kv(p, p.v, p.hdim_v, b, hk, false);
}

bool visible(const Problem& p, int64_t b, int64_t i, int64_t j) {
  const MaskSpec& m = p.mask;
  if (m.kind == MaskKind::none) return true;
  const int64_t diagonal =
      m.align == MaskAlign::top_left ? i : i + p.key_length(b) - p.query_length(b);
  const bool right_ok = m.window_right < 0 || j <= diagonal + m.window_right;
  if (!right_ok) return false;
  const bool left_ok = m.window_left < 0 || j >= diagonal - m.window_left;
  return left_ok || j < m.sink_tokens;
}

int64_t bias_offset(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  return p.bias.offset({b, h, i, j});
}

Logit logit(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j, double dot) {
  Logit out{p.scale() * dot, p.scale()};
  if (p.softcap > 0) {
    const double t = std::tanh(out.value / p.softcap);
    out.value = p.softcap * t;
    out.d_dot = p.scale() * (1.0 - t * t);
  }
  if (p.bias_kind == BiasKind::elementwise) {
    out.value += numeric::load(p.bias.data, p.bias.dtype, bias_offset(p, b, h, i, j));
  } else if (p.bias_kind == BiasKind::alibi) {
    const TensorView& slopes = p.alibi_slopes;
    const double slope =
        slopes.rank == 1 ? numeric::load(slopes, {h}) : numeric::load(slopes, {b, h});
    const int64_t distance = i + p.key_length(b) - p.query_length(b) - j;
    out.value -= slope * static_cast<double>(distance < 0 ? -distance : distance);
  }
  return out;
}

bool has_sink_logit(const Problem& p) {
  return !p.sink_logits.empty();
}

double sink_logit(const Problem& p, int64_t h) {
  return numeric::load(p.sink_logits, {h});
}

double dropout_factor(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!p.has_dropout()) return 1.0;
  const unsigned int word =
      philox::dropout_word(p.dropout.seed, p.dropout.offset, b, h, p.nhead_q, i, j);
  if (!philox::dropout_keep(word, philox::dropout_threshold(p.dropout.p))) return 0.0;
  return 1.0 / (1.0 - p.dropout.p);
}

}  // namespace tilefmha::reference::detail
