// FP8 forward with per-tensor scales: Q, K, V are stored as e4m3 (range +-448) after dividing
// by a per-tensor scale, and the engine dequantizes x = stored * descale before any arithmetic.
// The output is bf16. The check runs the formula on the dequantized values, so it isolates the
// engine's arithmetic from the (much larger) fp8 quantization error, which is printed apart.
#include <cmath>
#include <cstdio>
#include <random>

#include "example_support.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;

int main() {
  constexpr int64_t kBatch = 2, kHeads = 2, kSeq = 32, kDim = 64;
  // Values in [-1, 1) divided by these fill e4m3's range without saturating (1 / 0.004 = 250).
  Fp8Scales scales;
  scales.kind = Fp8ScaleKind::per_tensor;
  scales.q_descale = 0.004;
  scales.k_descale = 0.005;
  scales.v_descale = 0.003;

  examples::HostBuffer q(DType::fp8_e4m3, {kBatch, kSeq, kHeads, kDim});
  examples::HostBuffer k(DType::fp8_e4m3, {kBatch, kSeq, kHeads, kDim});
  examples::HostBuffer v(DType::fp8_e4m3, {kBatch, kSeq, kHeads, kDim});
  examples::HostBuffer o(DType::bf16, {kBatch, kSeq, kHeads, kDim});
  std::mt19937_64 rng(51);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  double quantization = 0.0;  // largest |dequantized - original| over Q
  for (int64_t e = 0; e < q.size(); ++e) {
    const double original = uniform(rng);
    q.set(e, original / scales.q_descale);
    quantization = std::max(quantization, std::abs(q.at(e) * scales.q_descale - original));
    k.set(e, uniform(rng) / scales.k_descale);
    v.set(e, uniform(rng) / scales.v_descale);
  }
  std::printf("fp8 e4m3 quantization error of Q: %.3g\n", quantization);

  const Problem problem = ProblemBuilder(Family::fwd)
                              .dtype(DType::fp8_e4m3)  // out_dtype becomes bf16
                              .shape(kBatch, kHeads, kHeads, kSeq, kSeq, kDim, kDim)
                              .fp8_scales(scales)
                              .q(q.view)
                              .k(k.view)
                              .v(v.view)
                              .o(o.view)
                              .build();
  reference::run(problem);

  examples::MaxError error;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t i = 0; i < kSeq; ++i) {
        auto query = examples::read_row(q.view, b, i, h);
        for (double& x : query) x *= scales.q_descale;
        const auto expected = examples::attend_row(
            query, kSeq, kDim, 1.0 / std::sqrt(double(kDim)),
            [&](int64_t j, int64_t c) {
              return numeric::load(k.view, {b, j, h, c}) * scales.k_descale;
            },
            [&](int64_t j, int64_t c) {
              return numeric::load(v.view, {b, j, h, c}) * scales.v_descale;
            });
        for (int64_t c = 0; c < kDim; ++c)
          error.add(numeric::load(o.view, {b, i, h, c}), expected[c]);
      }
  // bf16 output: half a unit in the last place of values below 1 is 2^-9, about 2e-3.
  return error.report("fp8 (per-tensor scales) O vs formula on dequantized inputs", 2e-3) ? 0 : 1;
}
