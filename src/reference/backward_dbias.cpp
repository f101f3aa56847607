#include "reference/backward_dbias.hpp"

#include <vector>

#include "core/numeric.hpp"
#include "core/parallel.hpp"
#include "reference/backward_pair.hpp"

namespace tilefmha::reference::detail {
namespace {

// The (batch, head) pairs whose dBias elements coincide form one slab. Each slab is reduced by
// one task in a fixed member order, so there are no races and the result is the same on every
// run whatever the thread count.
struct SlabShape {
  bool per_batch, per_head, per_query, per_key;  // false: that dim is broadcast (stride 0)
  int64_t batches, heads, rows, cols;            // extents of the slab grid and of one slab
};

SlabShape slab_shape(const Problem& p) {
  const TensorView& out = p.bwd.dbias;
  SlabShape s{
      out.stride[0] != 0, out.stride[1] != 0, out.stride[2] != 0, out.stride[3] != 0, 0, 0, 0, 0};
  s.batches = s.per_batch ? p.batch : 1;
  s.heads = s.per_head ? p.nhead_q : 1;
  s.rows = s.per_query ? p.seqlen_q : 1;
  s.cols = s.per_key ? p.seqlen_k : 1;
  return s;
}

void add_member(const Problem& p, const SlabShape& s, int64_t b, int64_t h,
                std::vector<double>& sums) {
  const QueryHeadRows rows = gather_query_head(p, b, h);
  const Rows k = gather_k(p, b, kv_head(p, h));
  const Rows v = gather_v(p, b, kv_head(p, h));
  for (int64_t i = 0; i < rows.q.length; ++i) {
    for (int64_t j = 0; j < k.length; ++j) {
      if (!visible(p, b, i, j)) continue;
      const PairGradient grad = pair_gradient(p, b, h, i, j, rows, k.row(j), v.row(j));
      sums[(s.per_query ? i : 0) * s.cols + (s.per_key ? j : 0)] += grad.ds;
    }
  }
}

}  // namespace

void write_dbias(const Problem& p) {
  const SlabShape s = slab_shape(p);
  const TensorView& out = p.bwd.dbias;
  parallel_for(s.batches * s.heads, [&](int64_t task) {
    const int64_t slab_b = task / s.heads;
    const int64_t slab_h = task % s.heads;
    std::vector<double> sums(s.rows * s.cols, 0.0);
    for (int64_t b = 0; b < p.batch; ++b) {
      if (s.per_batch && b != slab_b) continue;
      for (int64_t h = 0; h < p.nhead_q; ++h) {
        if (s.per_head && h != slab_h) continue;
        add_member(p, s, b, h, sums);
      }
    }
    for (int64_t i = 0; i < s.rows; ++i)
      for (int64_t j = 0; j < s.cols; ++j)
        numeric::store(out, {slab_b, slab_h, i, j}, sums[i * s.cols + j]);
  });
}

}  // namespace tilefmha::reference::detail
