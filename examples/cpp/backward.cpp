// Backward: the forward saves O and the log-sum-exp; the backward stages (rowsum(dO*O), then
// dQ/dK/dV, then dQ's conversion) run in order through reference::backward. The gradients are
// checked against the analytic formulas written out directly:
//   P = softmax(scale Q K^T), dP = dO V^T, dS = P * (dP - rowsum(dO * O)),
//   dV = P^T dO, dQ = scale dS K, dK = scale dS^T Q.
#include <cmath>
#include <cstdio>
#include <vector>

#include "example_support.hpp"
#include "tilefmha/problem.hpp"
#include "tilefmha/reference.hpp"

using namespace tilefmha;

int main() {
  constexpr int64_t kBatch = 1, kHeads = 2, kSeqQ = 12, kSeqK = 20, kDim = 16;
  examples::HostBuffer q(DType::fp32, {kBatch, kSeqQ, kHeads, kDim});
  examples::HostBuffer k(DType::fp32, {kBatch, kSeqK, kHeads, kDim});
  examples::HostBuffer v(DType::fp32, {kBatch, kSeqK, kHeads, kDim});
  examples::HostBuffer o(DType::fp32, {kBatch, kSeqQ, kHeads, kDim});
  examples::HostBuffer lse(DType::fp32, {kBatch, kHeads, kSeqQ});
  examples::HostBuffer d_o(DType::fp32, {kBatch, kSeqQ, kHeads, kDim});
  examples::HostBuffer dq(DType::fp32, {kBatch, kSeqQ, kHeads, kDim});
  examples::HostBuffer dk(DType::fp32, {kBatch, kSeqK, kHeads, kDim});
  examples::HostBuffer dv(DType::fp32, {kBatch, kSeqK, kHeads, kDim});
  // Workspace of the staged backward: D = rowsum(dO * O) and the fp32 dQ accumulator.
  examples::HostBuffer d(DType::fp32, {kBatch, kHeads, kSeqQ});
  examples::HostBuffer dq_acc(DType::fp32, {kBatch, kSeqQ, kHeads, kDim});
  examples::fill_uniform(q, 41);
  examples::fill_uniform(k, 42);
  examples::fill_uniform(v, 43);
  examples::fill_uniform(d_o, 44);

  const auto builder = [&](Family family) {
    ProblemBuilder b(family);
    b.dtype(DType::fp32)
        .shape(kBatch, kHeads, kHeads, kSeqQ, kSeqK, kDim, kDim)
        .q(q.view)
        .k(k.view)
        .v(v.view)
        .o(o.view)
        .lse(lse.view);
    return b;
  };
  reference::run(builder(Family::fwd).build());  // O and LSE, which the backward reads
  Backward grads;
  grads.d_o = d_o.view;
  grads.dq = dq.view;
  grads.dk = dk.view;
  grads.dv = dv.view;
  grads.d = d.view;
  grads.dq_acc = dq_acc.view;
  reference::backward(builder(Family::bwd_dq_dk_dv).backward(grads).build());

  const double scale = 1.0 / std::sqrt(double(kDim));
  const auto at = [](const examples::HostBuffer& t, int64_t s, int64_t h, int64_t c) {
    return numeric::load(t.view, {0, s, h, c});
  };
  examples::MaxError dq_error, dk_error, dv_error;
  for (int64_t h = 0; h < kHeads; ++h) {
    // P and dS for the whole head, then the three products.
    std::vector<double> p(kSeqQ * kSeqK), ds(kSeqQ * kSeqK);
    for (int64_t i = 0; i < kSeqQ; ++i) {
      double largest = -INFINITY, total = 0.0, rowsum = 0.0;
      for (int64_t j = 0; j < kSeqK; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < kDim; ++c) dot += at(q, i, h, c) * at(k, j, h, c);
        p[i * kSeqK + j] = scale * dot;
        largest = std::max(largest, scale * dot);
      }
      for (int64_t j = 0; j < kSeqK; ++j)
        total += (p[i * kSeqK + j] = std::exp(p[i * kSeqK + j] - largest));
      for (int64_t j = 0; j < kSeqK; ++j) p[i * kSeqK + j] /= total;
      for (int64_t c = 0; c < kDim; ++c) rowsum += at(d_o, i, h, c) * at(o, i, h, c);
      for (int64_t j = 0; j < kSeqK; ++j) {
        double dp = 0.0;
        for (int64_t c = 0; c < kDim; ++c) dp += at(d_o, i, h, c) * at(v, j, h, c);
        ds[i * kSeqK + j] = p[i * kSeqK + j] * (dp - rowsum);
      }
    }
    for (int64_t c = 0; c < kDim; ++c) {
      for (int64_t i = 0; i < kSeqQ; ++i) {
        double sum = 0.0;
        for (int64_t j = 0; j < kSeqK; ++j) sum += ds[i * kSeqK + j] * at(k, j, h, c);
        dq_error.add(at(dq, i, h, c), scale * sum);
      }
      for (int64_t j = 0; j < kSeqK; ++j) {
        double dk_sum = 0.0, dv_sum = 0.0;
        for (int64_t i = 0; i < kSeqQ; ++i) {
          dk_sum += ds[i * kSeqK + j] * at(q, i, h, c);
          dv_sum += p[i * kSeqK + j] * at(d_o, i, h, c);
        }
        dk_error.add(at(dk, j, h, c), scale * dk_sum);
        dv_error.add(at(dv, j, h, c), dv_sum);
      }
    }
  }
  const bool ok = dq_error.report("dQ vs formula", 1e-5) & dk_error.report("dK vs formula", 1e-5) &
                  dv_error.report("dV vs formula", 1e-5);
  return ok ? 0 : 1;
}
