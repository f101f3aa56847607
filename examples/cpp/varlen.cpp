// Variable-length (group mode) forward: three sequences of different query and key lengths
// packed back to back, described by prefix sums instead of padding. Also asks for the
// log-sum-exp, which backward and split-KV combine consume.
#include <cmath>
#include <cstdio>
#include <vector>

#include "example_support.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;

int main() {
  constexpr int64_t kHeads = 3, kDim = 32;
  // Sequence b owns query tokens [seqstart_q[b], seqstart_q[b+1]) and likewise for keys.
  const std::vector<int64_t> seqstart_q = {0, 5, 17, 30};
  const std::vector<int64_t> seqstart_k = {0, 9, 17, 57};
  const int64_t total_q = seqstart_q.back(), total_k = seqstart_k.back();

  // Group mode: batch dimension 1, the sequence dimension holds every token.
  examples::HostBuffer q(DType::fp32, {1, total_q, kHeads, kDim});
  examples::HostBuffer k(DType::fp32, {1, total_k, kHeads, kDim});
  examples::HostBuffer v(DType::fp32, {1, total_k, kHeads, kDim});
  examples::HostBuffer o(DType::fp32, {1, total_q, kHeads, kDim});
  examples::HostBuffer lse(DType::fp32, {1, kHeads, total_q});
  examples::fill_uniform(q, 11);
  examples::fill_uniform(k, 12);
  examples::fill_uniform(v, 13);

  const Problem problem = ProblemBuilder(Family::fwd)
                              .dtype(DType::fp32)
                              .shape(1, kHeads, kHeads, 0, 0, kDim, kDim)  // lengths from group()
                              .group(seqstart_q, seqstart_k)
                              .q(q.view)
                              .k(k.view)
                              .v(v.view)
                              .o(o.view)
                              .lse(lse.view)
                              .build();
  std::printf("%s\n", problem.describe().c_str());
  reference::run(problem);

  examples::MaxError o_error, lse_error;
  const double scale = 1.0 / std::sqrt(double(kDim));
  for (size_t b = 0; b + 1 < seqstart_q.size(); ++b) {
    const int64_t key_begin = seqstart_k[b], key_count = seqstart_k[b + 1] - key_begin;
    for (int64_t t = seqstart_q[b]; t < seqstart_q[b + 1]; ++t)
      for (int64_t h = 0; h < kHeads; ++h) {
        const auto query = examples::read_row(q.view, 0, t, h);
        const auto key = [&](int64_t j, int64_t c) {
          return numeric::load(k.view, {0, key_begin + j, h, c});
        };
        const auto expected =
            examples::attend_row(query, key_count, kDim, scale, key, [&](int64_t j, int64_t c) {
              return numeric::load(v.view, {0, key_begin + j, h, c});
            });
        for (int64_t c = 0; c < kDim; ++c)
          o_error.add(numeric::load(o.view, {0, t, h, c}), expected[c]);
        // LSE = log sum_j exp(scale * q . k_j), natural log.
        double sum = 0.0;
        for (int64_t j = 0; j < key_count; ++j) {
          double dot = 0.0;
          for (int64_t c = 0; c < kDim; ++c) dot += query[c] * key(j, c);
          sum += std::exp(scale * dot);
        }
        lse_error.add(numeric::load(lse.view, {0, h, t}), std::log(sum));
      }
  }
  const bool ok =
      o_error.report("varlen O vs formula", 1e-5) & lse_error.report("varlen LSE vs formula", 1e-5);
  return ok ? 0 : 1;
}
