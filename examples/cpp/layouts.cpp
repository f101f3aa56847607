// Memory layouts: the engine always indexes Q/K/V/O as logical [batch, seq, head, dim]; the
// view's strides say where each element lives. bshd() and bhsd() build the two common layouts
// over the same logical values, and the results must match element for element.
#include <cmath>
#include <cstdio>
#include <vector>

#include "example_support.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;

namespace {

constexpr int64_t kBatch = 2, kHeads = 3, kSeq = 24, kDim = 16;

// Storage for the four tensors of one layout; `make_view` is bshd or bhsd.
struct LayoutTensors {
  std::vector<float> q, k, v, o;
  TensorView qv, kv, vv, ov;
  template <typename MakeView>
  explicit LayoutTensors(MakeView make_view)
      : q(kBatch * kSeq * kHeads * kDim), k(q.size()), v(q.size()), o(q.size()) {
    qv = make_view(q.data(), DType::fp32, kBatch, kSeq, kHeads, kDim, MemorySpace::host);
    kv = make_view(k.data(), DType::fp32, kBatch, kSeq, kHeads, kDim, MemorySpace::host);
    vv = make_view(v.data(), DType::fp32, kBatch, kSeq, kHeads, kDim, MemorySpace::host);
    ov = make_view(o.data(), DType::fp32, kBatch, kSeq, kHeads, kDim, MemorySpace::host);
  }
  Problem problem() const {
    return ProblemBuilder(Family::fwd)
        .dtype(DType::fp32)
        .shape(kBatch, kHeads, kHeads, kSeq, kSeq, kDim, kDim)
        .q(qv)
        .k(kv)
        .v(vv)
        .o(ov)
        .build();
  }
};

// The same logical value for element (b, s, h, c) of tensor `which`, whatever the layout.
double value_of(int which, int64_t b, int64_t s, int64_t h, int64_t c) {
  return std::sin(0.37 * (which + 1) * (1 + b * 7 + s * 3 + h * 5 + c * 11));
}

}  // namespace

int main() {
  LayoutTensors bshd_tensors(bshd), bhsd_tensors(bhsd);
  for (LayoutTensors* tensors : {&bshd_tensors, &bhsd_tensors})
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t s = 0; s < kSeq; ++s)
        for (int64_t h = 0; h < kHeads; ++h)
          for (int64_t c = 0; c < kDim; ++c) {
            numeric::store(tensors->qv, {b, s, h, c}, value_of(0, b, s, h, c));
            numeric::store(tensors->kv, {b, s, h, c}, value_of(1, b, s, h, c));
            numeric::store(tensors->vv, {b, s, h, c}, value_of(2, b, s, h, c));
          }
  std::printf("bshd strides %lld %lld %lld %lld; bhsd strides %lld %lld %lld %lld\n",
              (long long)bshd_tensors.qv.stride[0], (long long)bshd_tensors.qv.stride[1],
              (long long)bshd_tensors.qv.stride[2], (long long)bshd_tensors.qv.stride[3],
              (long long)bhsd_tensors.qv.stride[0], (long long)bhsd_tensors.qv.stride[1],
              (long long)bhsd_tensors.qv.stride[2], (long long)bhsd_tensors.qv.stride[3]);
  reference::run(bshd_tensors.problem());
  reference::run(bhsd_tensors.problem());

  examples::MaxError formula, between;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < kSeq; ++i) {
        const auto expected = examples::attend_row(
            examples::read_row(bshd_tensors.qv, b, i, h), kSeq, kDim, 1.0 / std::sqrt(double(kDim)),
            [&](int64_t j, int64_t c) { return value_of(1, b, j, h, c); },
            [&](int64_t j, int64_t c) { return value_of(2, b, j, h, c); });
        for (int64_t c = 0; c < kDim; ++c) {
          const double in_bhsd = numeric::load(bhsd_tensors.ov, {b, i, h, c});
          formula.add(in_bhsd, expected[c]);
          between.add(in_bhsd, numeric::load(bshd_tensors.ov, {b, i, h, c}));
        }
      }
  // The two layouts compute the same sums in the same order: bit-identical outputs.
  const bool ok =
      formula.report("bhsd O vs formula", 1e-5) & between.report("bhsd O vs bshd O", 0.0);
  // The bhsd output really is head-major in memory: element (b=0, s=1, h=0, c=0) sits at kDim.
  const bool head_major =
      bhsd_tensors.o[kDim] == float(numeric::load(bhsd_tensors.ov, {0, 1, 0, 0}));
  std::printf("bhsd memory order: %s\n", head_major ? "ok" : "FAILED");
  return ok && head_major ? 0 : 1;
}
