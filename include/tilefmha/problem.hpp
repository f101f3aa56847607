// The attention problem: shapes, features and the tensors of one call, for all nine families.
//
// Conventions (DESIGN §3):
//  * Q, K, V, O views are logical [batch, seq, head, dim] (bshd/bhsd helpers set the strides).
//    Group mode: batch dimension 1, seq = total tokens, sequence b spans
//    [seqstart[b], seqstart[b+1]).
//  * Paged problems (page_table != none): K and V are the caches, logical
//    [num_pages, page_size, nhead_k, dim] whatever the KvLayout (the layout only sets strides).
//  * Index metadata (seqstarts, cache lengths, page tables) lives in host vectors so that
//    validation can check it; a GPU plan uploads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tilefmha/tensor.hpp"
#include "tilefmha/types.hpp"

namespace tilefmha {

struct MaskSpec {
  MaskKind kind = MaskKind::none;
  MaskAlign align = MaskAlign::top_left;
  // Key j is visible to query i when  d - window_left <= j <= d + window_right,  where
  // d = i (top_left) or i + seqlen_k - seqlen_q (bottom_right); -1 = unbounded.
  // causal is window_left = -1, window_right = 0.
  int64_t window_left = -1;
  int64_t window_right = -1;
  // StreamingLLM: keys j < sink_tokens stay visible under a window (never beyond the
  // causal/right bound).
  int64_t sink_tokens = 0;
};

// Keep decision of element (b, h, i, j) (i, j local to sequence b) by Philox4x32-10; see
// core/dropout.hpp for the exact counter. Kept values are scaled by 1 / (1 - p).
struct DropoutSpec {
  double p = 0.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Optional uint8 [batch, nhead_q, seqlen_q, seqlen_k]: the top 8 bits of each element's
  // random word, for tests (group mode: batch index and local i, j; max lengths).
  TensorView random_values;
};

// FP8 inputs are dequantized x = stored * scale before any arithmetic.
struct Fp8Scales {
  Fp8ScaleKind kind = Fp8ScaleKind::none;
  // per_tensor
  double q_descale = 1.0, k_descale = 1.0, v_descale = 1.0;
  // per_block: fp32 [batch, heads, ceil(seq / kFp8ScaleBlock)] (group mode: local token index)
  TensorView q_block, k_block, v_block;
  // per_page (paged caches): fp32 [num_pages, nhead_k]; Q then uses q_descale.
  TensorView k_page, v_page;
};
inline constexpr int64_t kFp8ScaleBlock = 128;

struct PagedKv {
  PageTableKind table = PageTableKind::none;
  KvLayout layout = KvLayout::nhd;
  int64_t page_size = 0;
  int64_t num_pages = 0;
  // vllm_block_table: row-major [batch, max_pages_per_seq]; key j of sequence b lives in page
  // block_table[b * max_pages_per_seq + j / page_size], slot j % page_size.
  std::vector<int32_t> block_table;
  int64_t max_pages_per_seq = 0;
  // sglang_page_list: key j of sequence b lives in page
  // page_indices[page_indptr[b] + j / page_size], slot j % page_size.
  std::vector<int64_t> page_indptr;
  std::vector<int32_t> page_indices;
};

// Append-KV writes seqlen_knew new tokens per sequence into the cache (K, V views, contiguous
// or paged) at cache positions key_length(b) + t, rotating new K (and Q when rotate_q) by RoPE.
// The RoPE position of new key t is key_length(b) + t + position_offset(b); Q row i of sequence b
// has RoPE position key_length(b) + i + position_offset(b).
//
// A fwd_appendkv problem that also sets O asks for attention after the append: Q attends to the
// cached and the new keys (attention_after_append() is that second problem), one plan on the GPU.
struct AppendKv {
  int64_t seqlen_knew = 0;
  TensorView k_new, v_new;  // [batch, seqlen_knew, nhead_k, dim]
  RopeKind rope = RopeKind::none;
  int64_t rotary_dim = 0;  // even, <= hdim_q
  // fp32 [max_position, rotary_dim / 2]: cos and sin of every rotated position's angles.
  TensorView rope_cos, rope_sin;
  // > 0: no tables; the angles are position * rope_theta^(-2f / rotary_dim), computed in double
  // (the usual RoPE base, e.g. 10000). 0: the tables give them.
  double rope_theta = 0.0;
  // Optional, batch entries: added to sequence b's RoPE positions (not to where tokens are
  // stored), for caches whose slot index is not the token's absolute position (e.g. evicted
  // prefixes). Empty: no offset.
  std::vector<int64_t> rope_position_offsets;
  bool rotate_q = false;  // rotates Q in place

  int64_t position_offset(int64_t b) const {
    return rope_position_offsets.empty() ? 0 : rope_position_offsets[static_cast<size_t>(b)];
  }
};

// Split-KV: split s covers keys [s * chunk, min((s + 1) * chunk, key_length(b))) where
// chunk = splitkv_chunk(key_length(b), num_splits). Partials exclude the sink logit; the
// combine adds it once. For family fwd, num_splits is a request to the dispatcher: 0 lets it
// choose (split-KV + combine where that beats one pass), 1 forbids splitting, n > 1 forces n
// splits; the partials then live in the plan's workspace. fwd_splitkv and the combine take
// n >= 1 and their partials from o_acc / lse_acc.
struct SplitKv {
  int64_t num_splits = 0;
  TensorView o_acc;    // fp32 [num_splits, batch, nhead_q, seqlen_q, hdim_v]
  TensorView lse_acc;  // fp32 [num_splits, batch, nhead_q, seqlen_q]
};

struct DeviceIndexArrays {
  const int64_t* seqstart_q = nullptr;  // batch + 1 prefix sums (group mode)
  const int64_t* seqstart_k = nullptr;  // batch + 1 prefix sums (group mode)
  const int64_t* seqlen_k = nullptr;    // batch key counts (either mode)
  // Page tables (PagedKv's, on the device): a vLLM block table [batch, max_pages_per_seq], or an
  // SGLang page list (batch + 1 offsets into the page ids).
  const int32_t* block_table = nullptr;
  const int64_t* page_indptr = nullptr;
  const int32_t* page_indices = nullptr;
  // Opt-in checked mode: before launching, the run synchronizes the stream, copies these arrays
  // to the host and validates them as host arrays, so a bad entry (a page id outside the pool,
  // a table shorter than its sequence, a length past the longest) is reported by name instead
  // of read out of bounds. It costs a synchronize and copies, so it cannot be graph-captured.
  bool checked = false;
  // append.rope_position_offsets (batch entries); needs append.rope_theta, since tables cannot
  // be checked against positions the host cannot read.
  const int64_t* rope_position_offsets = nullptr;
  bool any() const {
    return seqstart_q || seqstart_k || seqlen_k || block_table || page_indptr || page_indices ||
           rope_position_offsets;
  }
  bool page_table() const { return block_table || page_indptr || page_indices; }
};

struct Backward {
  TensorView d_o;         // like O
  TensorView dq, dk, dv;  // like Q, K, V
  TensorView dbias;       // like bias (same broadcast: gradients summed over broadcast dims)
  TensorView d;       // fp32 [batch, nhead_q, seqlen_q]: rowsum(dO * O), written by bwd_dot_do_o
  TensorView dq_acc;  // fp32 [batch, seqlen_q, nhead_q, hdim_q], written by bwd_dq_dk_dv
  // Optional fp32 [nhead_q]: the gradient of sink_logits (which it needs),
  //   dsink[h] = -sum over the valid query rows i of head h (every sequence) of
  //              exp(sink[h] - lse[i]) * D[i],
  // overwritten (not accumulated) by the backward (family bwd_dq_dk_dv). Empty: not computed.
  TensorView dsink;
  // A GPU plan of the backward (family bwd_dq_dk_dv: all three stages) keeps d and dq_acc in
  // its workspace when they are not set; the CPU reference needs them.
  // Deterministic: bitwise-identical repeats. The GPU accumulates dQ per key block in plan
  // workspace slices (a set dq_acc is then not written) and sums them in a fixed order.
  bool deterministic = false;
};

struct Problem {
  Family family = Family::fwd;
  DType dtype = DType::bf16;      // Q, K, V
  DType out_dtype = DType::bf16;  // O (and dQ/dK/dV); differs from dtype only for fp8 inputs
  Mode mode = Mode::batch;

  int64_t batch = 1;
  int64_t nhead_q = 1;
  int64_t nhead_k = 1;
  // Batch mode: the lengths. Group mode: the largest sequence (set by the builder).
  int64_t seqlen_q = 0;
  int64_t seqlen_k = 0;
  int64_t hdim_q = 0;
  int64_t hdim_v = 0;

  // Group mode prefix sums, batch + 1 entries each.
  std::vector<int64_t> seqstart_q;
  std::vector<int64_t> seqstart_k;
  // Optional valid key count per sequence (KV caches, paged problems, append-KV cache fill).
  std::vector<int64_t> seqlen_k_per_batch;
  // The same index arrays already in device memory (int64), as serving engines keep them; each
  // replaces its host vector above, which must then be empty. The caller gives batch and the
  // longest lengths (seqlen_q, seqlen_k); validation cannot read device contents, so the GPU
  // kernels trust them, and the CPU reference refuses such problems.
  DeviceIndexArrays device_indices;

  std::optional<double> softmax_scale;  // default 1 / sqrt(hdim_q)
  double softcap = 0.0;                 // 0: off; else s <- cap * tanh(s / cap)
  MaskSpec mask;
  BiasKind bias_kind = BiasKind::none;
  TensorView bias;          // [batch, nhead_q, seqlen_q, seqlen_k], 0 strides broadcast
  TensorView alibi_slopes;  // fp32 [nhead_q] or [batch, nhead_q]
  TensorView sink_logits;   // fp32 [nhead_q], finite; empty = no sink logit. Validation
                            // checks host values; device values are not read on the host.
  bool return_lse = false;
  // Family fwd: O and LSE already hold an attention state of these query rows over other keys
  // (O normalized, LSE natural log; LSE -inf: no key, O not read), and the result is merged
  // into it, as merge_states merges two states:
  //   LSE' = log(exp(LSE) + exp(LSE_new)),  O' = exp(LSE - LSE') O + exp(LSE_new - LSE') O_new.
  // Context parallelism folds each ring step into the output this way instead of keeping
  // partial states to merge at the end. Needs lse; one pass (no split-KV), no sink logit.
  bool accumulate = false;

  TensorView q, k, v, o;
  TensorView lse;  // fp32 [batch, nhead_q, seqlen_q] (group mode [1, nhead_q, total_q])

  DropoutSpec dropout;
  Fp8Scales fp8;
  PagedKv paged;
  AppendKv append;
  SplitKv split;
  Backward bwd;

  // Derived facts, one definition each.
  double scale() const;
  bool is_paged() const { return paged.table != PageTableKind::none; }
  bool has_dropout() const { return dropout.p > 0.0; }
  // Per-sequence key counts, on the host or the device.
  bool has_key_lengths() const {
    return !seqlen_k_per_batch.empty() || device_indices.seqlen_k != nullptr;
  }
  bool is_backward() const;
  // Query / key counts of sequence b (group-mode seqstarts, cache lengths, or batch lengths).
  int64_t query_length(int64_t b) const;
  int64_t key_length(int64_t b) const;
  // Index along the seq dim of the Q/O (K/V) view where sequence b starts (0 in batch mode).
  int64_t query_start(int64_t b) const;
  int64_t key_start(int64_t b) const;
  // Total query tokens (batch * seqlen_q in batch mode; 0 in group mode over device prefix
  // sums, which the host does not read).
  int64_t total_q() const;
  // Rows along the seq dim of the Q/O views: seqlen_q in batch mode, the packed tokens in group
  // mode (Q's seq extent where the prefix sums live on the device).
  int64_t query_rows() const;
  // Page and slot of key j of sequence b in a paged cache.
  struct PageSlot {
    int64_t page;
    int64_t slot;
  };
  PageSlot page_slot(int64_t b, int64_t j) const;
  // A short human-readable description, e.g. for the CLI summary line.
  std::string describe() const;
};

// The attention a fwd_appendkv problem with O asks for after its append: family fwd (contiguous
// cache) or fwd_pagedkv (paged), the append fields cleared, and key counts key_length(b) +
// seqlen_knew (host lengths updated; device lengths keep their pointer, which the GPU plan
// re-points at the updated counts it writes, and seqlen_k, their bound, grows by seqlen_knew).
Problem attention_after_append(const Problem& problem);
// Whether `problem` is a fwd_appendkv that also attends (O set).
bool appends_then_attends(const Problem& problem);

// Whether `problem` is a fwd_appendkv that quantizes as it appends: fp16 or bf16 new tokens into
// an fp8 paged cache (dtype fp8_e4m3 or fp8_e5m2) with per-page scales (fp8.kind = per_page),
// which it reads and updates. Per page and KV head that new tokens land in, K's and V's scales
// (fp8.k_page, fp8.v_page) become quantized_page_scale() of the page's new values (K rotated
// first); a page whose scale grows has its held codes re-encoded at the new scale; each new value
// is stored as the fp8 code of value / scale (round to nearest even, saturating; NaN stays NaN).
bool quantizes_append(const Problem& problem);
// The scale of a page that gains values of largest finite magnitude `new_amax`, with fp8_max
// the dtype's largest finite value (448 for e4m3, 57344 for e5m2): a page that held no key
// before takes new_amax / fp8_max (1 when new_amax is 0), one that held keys keeps `old_scale`
// while new_amax <= old_scale * fp8_max, else takes new_amax / fp8_max. Computed as the GPU
// does, in float.
float quantized_page_scale(DType dtype, bool held, float old_scale, float new_amax);

// Keys per split of split-KV, rounded to kSplitKvGranule so that GPU tiles never straddle
// two splits.
inline constexpr int64_t kSplitKvGranule = 128;
int64_t splitkv_chunk(int64_t key_length, int64_t num_splits);

// Fluent construction; build() validates and throws tilefmha::Error on the first problem.
class ProblemBuilder {
 public:
  explicit ProblemBuilder(Family family);

  ProblemBuilder& dtype(DType dtype);  // sets out_dtype too unless fp8 (then bf16)
  ProblemBuilder& out_dtype(DType dtype);
  ProblemBuilder& shape(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_q,
                        int64_t seqlen_k, int64_t hdim_q, int64_t hdim_v);
  // Group mode; batch, seqlen_q and seqlen_k are derived from the prefix sums.
  ProblemBuilder& group(std::vector<int64_t> seqstart_q, std::vector<int64_t> seqstart_k);
  ProblemBuilder& key_lengths(std::vector<int64_t> seqlen_k_per_batch);
  // Group mode over device prefix sums (int64, batch + 1 entries each; seqstart_k may be null for
  // paged caches): the caller gives batch and the longest query and key lengths.
  ProblemBuilder& group_on_device(const int64_t* seqstart_q, const int64_t* seqstart_k,
                                  int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k);
  // Per-sequence key counts in device memory (int64, batch entries); seqlen_k must be the longest.
  ProblemBuilder& key_lengths_on_device(const int64_t* seqlen_k_per_batch);
  // A paged cache's table in device memory (int32 page ids; paged.table says which form, and
  // PagedKv's host vectors stay empty): a vLLM block table with paged.max_pages_per_seq
  // columns, or an SGLang page list. Nothing on the host reads them, so validation checks only
  // that the table can hold the longest sequence; the kernels trust the entries.
  ProblemBuilder& block_table_on_device(const int32_t* block_table);
  ProblemBuilder& page_list_on_device(const int64_t* page_indptr, const int32_t* page_indices);
  // DeviceIndexArrays::checked: validate the device arrays on the host before each run.
  ProblemBuilder& checked_device_indices(bool checked);
  // Append-KV's RoPE position offsets in device memory (int64, batch entries); the angles must
  // then come from append.rope_theta.
  ProblemBuilder& rope_offsets_on_device(const int64_t* rope_position_offsets);

  ProblemBuilder& scale(double softmax_scale);
  ProblemBuilder& softcap(double cap);
  ProblemBuilder& causal(MaskAlign align = MaskAlign::top_left);
  ProblemBuilder& window(int64_t left, int64_t right, MaskAlign align = MaskAlign::top_left);
  ProblemBuilder& sink_tokens(int64_t count);
  ProblemBuilder& bias(TensorView bias);
  ProblemBuilder& alibi(TensorView slopes);
  ProblemBuilder& sink_logits(TensorView logits);
  ProblemBuilder& dropout(double p, uint64_t seed, uint64_t offset = 0,
                          TensorView random_values = {});
  ProblemBuilder& fp8_scales(Fp8Scales scales);

  ProblemBuilder& q(TensorView view);
  ProblemBuilder& k(TensorView view);
  ProblemBuilder& v(TensorView view);
  ProblemBuilder& o(TensorView view);
  ProblemBuilder& lse(TensorView view);                       // also sets return_lse
  ProblemBuilder& accumulate(bool merge_into_output = true);  // Problem::accumulate

  ProblemBuilder& paged(PagedKv paged);
  ProblemBuilder& append(AppendKv append);
  ProblemBuilder& splits(int64_t num_splits, TensorView o_acc = {}, TensorView lse_acc = {});
  ProblemBuilder& backward(Backward backward);

  // The problem as built so far, unvalidated (for tests that probe validation).
  const Problem& peek() const { return problem_; }
  Problem build() const;

 private:
  Problem problem_;
};

}  // namespace tilefmha
