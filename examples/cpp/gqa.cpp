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
  examples::BshdBuffers x(DType::fp32, DType::fp32, kBatch, kSeqQ, kSeqK, kHeadsQ, kHeadsK, kDim);
  x.fill_inputs(21);

  const Problem problem = ProblemBuilder(Family::fwd)
                              .dtype(DType::fp32)
                              .shape(kBatch, kHeadsQ, kHeadsK, kSeqQ, kSeqK, kDim, kDim)
                              .causal(MaskAlign::bottom_right)
                              .q(x.q.view)
                              .k(x.k.view)
                              .v(x.v.view)
                              .o(x.o.view)
                              .build();
  reference::run(problem);

  // Query head h reads K/V head h / 4; query i sees keys 0..i + kSeqK - kSeqQ.
  const examples::MaxError error =
      examples::formula_error(x, [](int64_t i) { return i + kSeqK - kSeqQ + 1; });
  return error.report("GQA (8 query heads on 2 KV heads) vs formula", 1e-5) ? 0 : 1;
}
