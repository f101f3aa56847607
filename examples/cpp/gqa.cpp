// Grouped-query attention: 8 query heads share 2 K/V heads (query head h reads K/V head
// h / 4), with a causal mask aligned bottom-right, as in decoding with a KV cache longer than
// the new queries: query i sees keys j <= i + seqlen_k - seqlen_q.
#include <cmath>
#include <cstdio>

#include "example_support.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;

int main() {
  constexpr int64_t kBatch = 2, kHeadsQ = 8, kHeadsK = 2, kSeqQ = 16, kSeqK = 40, kDim = 64;
  examples::HostBuffer q(DType::fp32, {kBatch, kSeqQ, kHeadsQ, kDim});
  examples::HostBuffer k(DType::fp32, {kBatch, kSeqK, kHeadsK, kDim});
  examples::HostBuffer v(DType::fp32, {kBatch, kSeqK, kHeadsK, kDim});
  examples::HostBuffer o(DType::fp32, {kBatch, kSeqQ, kHeadsQ, kDim});
  examples::fill_uniform(q, 21);
  examples::fill_uniform(k, 22);
  examples::fill_uniform(v, 23);

  const Problem problem = ProblemBuilder(Family::fwd)
                              .dtype(DType::fp32)
                              .shape(kBatch, kHeadsQ, kHeadsK, kSeqQ, kSeqK, kDim, kDim)
                              .causal(MaskAlign::bottom_right)
                              .q(q.view)
                              .k(k.view)
                              .v(v.view)
                              .o(o.view)
                              .build();
  reference::run(problem);

  examples::MaxError error;
  constexpr int64_t kGroup = kHeadsQ / kHeadsK;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeadsQ; ++h)
      for (int64_t i = 0; i < kSeqQ; ++i) {
        const int64_t kv_head = h / kGroup, visible = i + kSeqK - kSeqQ + 1;
        const auto expected = examples::attend_row(
            examples::read_row(q.view, b, i, h), visible, kDim, 1.0 / std::sqrt(double(kDim)),
            [&](int64_t j, int64_t c) {
              return numeric::load(k.view, {b, j, kv_head, c});
            },
            [&](int64_t j, int64_t c) {
              return numeric::load(v.view, {b, j, kv_head, c});
            });
        for (int64_t c = 0; c < kDim; ++c)
          error.add(numeric::load(o.view, {b, i, h, c}), expected[c]);
      }
  return error.report("GQA (8 query heads on 2 KV heads) vs formula", 1e-5) ? 0 : 1;
}
