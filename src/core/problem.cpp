#include "tilefmha/problem.hpp"

#include <cmath>
#include <sstream>

#include "tilefmha/error.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {

double Problem::scale() const {
  if (softmax_scale) return *softmax_scale;
  return hdim_q > 0 ? 1.0 / std::sqrt(static_cast<double>(hdim_q)) : 1.0;
}

bool Problem::is_backward() const {
  return family == Family::bwd_dot_do_o || family == Family::bwd_dq_dk_dv ||
         family == Family::bwd_convert_dq;
}

// With device index arrays the host knows only the longest lengths: those stand in below.
int64_t Problem::query_length(int64_t b) const {
  if (mode == Mode::group && !seqstart_q.empty()) return seqstart_q[b + 1] - seqstart_q[b];
  return seqlen_q;
}

int64_t Problem::key_length(int64_t b) const {
  if (!seqlen_k_per_batch.empty()) return seqlen_k_per_batch[b];
  if (mode == Mode::group && !seqstart_k.empty()) return seqstart_k[b + 1] - seqstart_k[b];
  return seqlen_k;
}

int64_t Problem::query_start(int64_t b) const {
  return mode == Mode::group && !seqstart_q.empty() ? seqstart_q[b] : 0;
}

int64_t Problem::key_start(int64_t b) const {
  return mode == Mode::group && !seqstart_k.empty() ? seqstart_k[b] : 0;
}

int64_t Problem::total_q() const {
  if (mode != Mode::group) return batch * seqlen_q;
  return seqstart_q.empty() ? 0 : seqstart_q.back();  // 0: unknown on the host
}

int64_t Problem::query_rows() const {
  if (mode != Mode::group) return seqlen_q;
  return seqstart_q.empty() ? q.shape[1] : seqstart_q.back();
}

Problem::PageSlot Problem::page_slot(int64_t b, int64_t j) const {
  const int64_t logical_page = j / paged.page_size;
  const int64_t slot = j % paged.page_size;
  if (paged.table == PageTableKind::vllm_block_table)
    return {paged.block_table[b * paged.max_pages_per_seq + logical_page], slot};
  return {paged.page_indices[paged.page_indptr[b] + logical_page], slot};
}

std::string Problem::describe() const {
  std::ostringstream out;
  out << to_string(family) << " " << to_string(dtype) << " " << to_string(mode) << " b=" << batch
      << " h=" << nhead_q << "/" << nhead_k << " sq=" << seqlen_q << " sk=" << seqlen_k
      << " d=" << hdim_q;
  if (hdim_v != hdim_q) out << "/" << hdim_v;
  if (mask.kind != MaskKind::none) {
    out << " mask=" << to_string(mask.kind) << "(" << mask.window_left << "," << mask.window_right
        << "," << to_string(mask.align);
    if (mask.sink_tokens > 0) out << ",sink=" << mask.sink_tokens;
    out << ")";
  }
  if (bias_kind != BiasKind::none) out << " bias=" << to_string(bias_kind);
  if (softcap > 0) out << " softcap=" << softcap;
  if (!sink_logits.empty()) out << " sink_logit";
  if (has_dropout()) out << " dropout=" << dropout.p;
  if (is_paged())
    out << " paged=" << to_string(paged.table) << "/" << to_string(paged.layout)
        << " page=" << paged.page_size;
  if (fp8.kind != Fp8ScaleKind::none) out << " fp8_scale=" << to_string(fp8.kind);
  if (split.num_splits > 1) out << " splits=" << split.num_splits;
  if (accumulate) out << " accumulate";
  return out.str();
}

int64_t splitkv_chunk(int64_t key_length, int64_t num_splits) {
  if (num_splits <= 1 || key_length <= 0) return key_length > 0 ? key_length : 1;
  const int64_t per_split = (key_length + num_splits - 1) / num_splits;
  return (per_split + kSplitKvGranule - 1) / kSplitKvGranule * kSplitKvGranule;
}

ProblemBuilder::ProblemBuilder(Family family) {
  problem_.family = family;
}

ProblemBuilder& ProblemBuilder::dtype(DType dtype) {
  problem_.dtype = dtype;
  problem_.out_dtype = default_out_dtype(dtype);
  return *this;
}

ProblemBuilder& ProblemBuilder::out_dtype(DType dtype) {
  problem_.out_dtype = dtype;
  return *this;
}

ProblemBuilder& ProblemBuilder::shape(int64_t batch, int64_t nhead_q, int64_t nhead_k,
                                      int64_t seqlen_q, int64_t seqlen_k, int64_t hdim_q,
                                      int64_t hdim_v) {
  problem_.batch = batch;
  problem_.nhead_q = nhead_q;
  problem_.nhead_k = nhead_k;
  problem_.seqlen_q = seqlen_q;
  problem_.seqlen_k = seqlen_k;
  problem_.hdim_q = hdim_q;
  problem_.hdim_v = hdim_v;
  return *this;
}

ProblemBuilder& ProblemBuilder::group(std::vector<int64_t> seqstart_q,
                                      std::vector<int64_t> seqstart_k) {
  problem_.mode = Mode::group;
  problem_.seqstart_q = std::move(seqstart_q);
  problem_.seqstart_k = std::move(seqstart_k);
  const auto& sq = problem_.seqstart_q;
  const auto& sk = problem_.seqstart_k;
  if (!sq.empty()) problem_.batch = static_cast<int64_t>(sq.size()) - 1;
  int64_t max_q = 0, max_k = 0;
  for (size_t b = 0; b + 1 < sq.size(); ++b) max_q = std::max(max_q, sq[b + 1] - sq[b]);
  for (size_t b = 0; b + 1 < sk.size(); ++b) max_k = std::max(max_k, sk[b + 1] - sk[b]);
  problem_.seqlen_q = max_q;
  if (!sk.empty()) problem_.seqlen_k = max_k;
  return *this;
}

ProblemBuilder& ProblemBuilder::key_lengths(std::vector<int64_t> seqlen_k_per_batch) {
  problem_.seqlen_k_per_batch = std::move(seqlen_k_per_batch);
  int64_t max_k = problem_.seqstart_k.empty() ? 0 : problem_.seqlen_k;
  for (int64_t len : problem_.seqlen_k_per_batch) max_k = std::max(max_k, len);
  problem_.seqlen_k = std::max(problem_.seqlen_k, max_k);
  return *this;
}

ProblemBuilder& ProblemBuilder::group_on_device(const int64_t* seqstart_q,
                                                const int64_t* seqstart_k, int64_t batch,
                                                int64_t max_seqlen_q, int64_t max_seqlen_k) {
  problem_.mode = Mode::group;
  problem_.device_indices.seqstart_q = seqstart_q;
  problem_.device_indices.seqstart_k = seqstart_k;
  problem_.batch = batch;
  problem_.seqlen_q = max_seqlen_q;
  problem_.seqlen_k = max_seqlen_k;
  return *this;
}

ProblemBuilder& ProblemBuilder::rope_offsets_on_device(const int64_t* rope_position_offsets) {
  problem_.device_indices.rope_position_offsets = rope_position_offsets;
  return *this;
}

ProblemBuilder& ProblemBuilder::key_lengths_on_device(const int64_t* seqlen_k_per_batch) {
  problem_.device_indices.seqlen_k = seqlen_k_per_batch;
  return *this;
}

ProblemBuilder& ProblemBuilder::block_table_on_device(const int32_t* block_table) {
  problem_.device_indices.block_table = block_table;
  return *this;
}

ProblemBuilder& ProblemBuilder::page_list_on_device(const int64_t* page_indptr,
                                                    const int32_t* page_indices) {
  problem_.device_indices.page_indptr = page_indptr;
  problem_.device_indices.page_indices = page_indices;
  return *this;
}

ProblemBuilder& ProblemBuilder::checked_device_indices(bool checked) {
  problem_.device_indices.checked = checked;
  return *this;
}

ProblemBuilder& ProblemBuilder::scale(double softmax_scale) {
  problem_.softmax_scale = softmax_scale;
  return *this;
}

ProblemBuilder& ProblemBuilder::softcap(double cap) {
  problem_.softcap = cap;
  return *this;
}

ProblemBuilder& ProblemBuilder::causal(MaskAlign align) {
  problem_.mask.kind = MaskKind::causal;
  problem_.mask.align = align;
  problem_.mask.window_left = -1;
  problem_.mask.window_right = 0;
  return *this;
}

ProblemBuilder& ProblemBuilder::window(int64_t left, int64_t right, MaskAlign align) {
  problem_.mask.kind = MaskKind::window;
  problem_.mask.align = align;
  problem_.mask.window_left = left;
  problem_.mask.window_right = right;
  return *this;
}

ProblemBuilder& ProblemBuilder::sink_tokens(int64_t count) {
  problem_.mask.sink_tokens = count;
  return *this;
}

ProblemBuilder& ProblemBuilder::bias(TensorView bias) {
  problem_.bias_kind = BiasKind::elementwise;
  problem_.bias = bias;
  return *this;
}

ProblemBuilder& ProblemBuilder::alibi(TensorView slopes) {
  problem_.bias_kind = BiasKind::alibi;
  problem_.alibi_slopes = slopes;
  return *this;
}

ProblemBuilder& ProblemBuilder::sink_logits(TensorView logits) {
  problem_.sink_logits = logits;
  return *this;
}

ProblemBuilder& ProblemBuilder::dropout(double p, uint64_t seed, uint64_t offset,
                                        TensorView random_values) {
  problem_.dropout = {p, seed, offset, random_values};
  return *this;
}

ProblemBuilder& ProblemBuilder::fp8_scales(Fp8Scales scales) {
  problem_.fp8 = std::move(scales);
  return *this;
}

ProblemBuilder& ProblemBuilder::q(TensorView view) {
  problem_.q = view;
  return *this;
}

ProblemBuilder& ProblemBuilder::k(TensorView view) {
  problem_.k = view;
  return *this;
}

ProblemBuilder& ProblemBuilder::v(TensorView view) {
  problem_.v = view;
  return *this;
}

ProblemBuilder& ProblemBuilder::o(TensorView view) {
  problem_.o = view;
  return *this;
}

ProblemBuilder& ProblemBuilder::lse(TensorView view) {
  problem_.lse = view;
  problem_.return_lse = true;
  return *this;
}

ProblemBuilder& ProblemBuilder::accumulate(bool merge_into_output) {
  problem_.accumulate = merge_into_output;
  return *this;
}

ProblemBuilder& ProblemBuilder::paged(PagedKv paged) {
  problem_.paged = std::move(paged);
  return *this;
}

ProblemBuilder& ProblemBuilder::append(AppendKv append) {
  problem_.append = std::move(append);
  return *this;
}

ProblemBuilder& ProblemBuilder::splits(int64_t num_splits, TensorView o_acc, TensorView lse_acc) {
  problem_.split = {num_splits, o_acc, lse_acc};
  return *this;
}

ProblemBuilder& ProblemBuilder::backward(Backward backward) {
  problem_.bwd = backward;
  return *this;
}

Problem ProblemBuilder::build() const {
  validate(problem_);
  return problem_;
}

}  // namespace tilefmha
