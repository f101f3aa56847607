// The fwd family's host problem: contiguous bshd Q/K/V/O (group mode packs the sequences along
// one token dimension, q = k lengths as the matrix declares them).
#include "sweep_problem.hpp"
#include "uniform_fill.hpp"

namespace tilefmha::cli {

std::string build_fwd_problem(const bench::MatrixShape& s, HostProblem& h) {
  if (s.bias != BiasKind::none) return "timing does not set up bias tensors yet";
  const bool group = s.mode() == Mode::group;
  std::vector<int64_t> seqstart{0};
  for (int64_t n : s.varlen) seqstart.push_back(seqstart.back() + n);
  const int64_t batch = group ? 1 : s.batch;
  const int64_t rows_q = group ? seqstart.back() : s.seqlen_q;
  const int64_t rows_k = group ? seqstart.back() : s.seqlen_k;
  const int64_t q_elems = batch * rows_q * s.nhead_q * s.hdim_q;
  const int64_t k_elems = batch * rows_k * s.nhead_k * s.hdim_q;
  const int64_t v_elems = batch * rows_k * s.nhead_k * s.hdim_v;
  const int64_t o_elems = batch * rows_q * s.nhead_q * s.hdim_v;
  fill_uniform(h.q, s.dtype, q_elems, 1);
  fill_uniform(h.k, s.dtype, k_elems, 2);
  fill_uniform(h.v, s.dtype, v_elems, 3);
  h.o.assign(static_cast<size_t>(o_elems * dtype_size(s.out_dtype)), std::byte{0});

  ProblemBuilder builder(Family::fwd);
  builder.dtype(s.dtype).shape(batch, s.nhead_q, s.nhead_k, rows_q, rows_k, s.hdim_q, s.hdim_v);
  if (group) builder.group(seqstart, seqstart);
  builder.q(bshd(h.q.data(), s.dtype, batch, rows_q, s.nhead_q, s.hdim_q))
      .k(bshd(h.k.data(), s.dtype, batch, rows_k, s.nhead_k, s.hdim_q))
      .v(bshd(h.v.data(), s.dtype, batch, rows_k, s.nhead_k, s.hdim_v))
      .o(bshd(h.o.data(), s.out_dtype, batch, rows_q, s.nhead_q, s.hdim_v));
  apply_shape_features(s, batch, rows_q, builder, h);
  h.problem = builder.build();

  h.flops = 2.0 * visible_pairs(h.problem) * static_cast<double>(s.nhead_q * (s.hdim_q + s.hdim_v));
  h.bytes = static_cast<double>((q_elems + k_elems + v_elems) * dtype_size(s.dtype) +
                                o_elems * dtype_size(s.out_dtype));
  return "";
}

}  // namespace tilefmha::cli
