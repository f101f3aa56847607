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

  examples::BshdBuffers x(DType::fp8_e4m3, DType::bf16, kBatch, kSeq, kSeq, kHeads, kHeads, kDim);
  examples::HostBuffer &q = x.q, &k = x.k, &v = x.v;
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
                              .q(x.q.view)
                              .k(x.k.view)
                              .v(x.v.view)
                              .o(x.o.view)
                              .build();
  reference::run(problem);

  const examples::MaxError error = examples::formula_error(
      x, [](int64_t) { return kSeq; }, {scales.q_descale, scales.k_descale, scales.v_descale});
  // bf16 output: half a unit in the last place of values below 1 is 2^-9, about 2e-3.
  return error.report("fp8 (per-tensor scales) O vs formula on dequantized inputs", 2e-3) ? 0 : 1;
}
