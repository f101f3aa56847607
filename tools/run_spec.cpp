#include "run_spec.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

[[noreturn]] void bad_flags(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, message);
}

std::string list_text(const std::vector<int64_t>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text;
}

void require_non_negative(int64_t value, const std::string& flag) {
  if (value < 0) bad_flags(flag + " " + std::to_string(value) + " is negative");
}

Family parse_family(const std::string& name) {
  // "bwd" names the whole backward; its main stage is bwd_dq_dk_dv.
  return name == "bwd" ? Family::bwd_dq_dk_dv : parse_enum<Family>(name);
}

bool pages_allowed(Family family) {
  return family == Family::fwd_pagedkv || family == Family::batch_prefill ||
         family == Family::fwd_splitkv || family == Family::fwd_splitkv_combine ||
         family == Family::fwd_appendkv;
}

RunStages stages_of(Family family, int64_t splits) {
  switch (family) {
    case Family::bwd_dot_do_o:
    case Family::bwd_dq_dk_dv:
    case Family::bwd_convert_dq:
      if (splits != 1) bad_flags("--splits " + std::to_string(splits) + " applies to forward runs");
      return RunStages::backward;
    case Family::fwd_splitkv:
    case Family::fwd_splitkv_combine: return RunStages::splitkv;
    case Family::fwd_appendkv:
      if (splits != 1)
        bad_flags("--splits " + std::to_string(splits) + " does not apply to fwd_appendkv");
      return RunStages::append;
    case Family::fwd:
    case Family::fwd_pagedkv:
    case Family::batch_prefill: return splits > 1 ? RunStages::splitkv : RunStages::forward;
  }
  return RunStages::forward;
}

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& lengths, const std::string& flag) {
  std::vector<int64_t> starts{0};
  for (int64_t length : lengths) {
    require_non_negative(length, flag + " entry");
    starts.push_back(starts.back() + length);
  }
  return starts;
}

// A seqstart file, checked to be a prefix sum.
std::vector<int64_t> read_seqstart(InputDir& input, std::string_view name) {
  std::vector<int64_t> starts = input.read_integers(name);
  if (starts.empty() || starts.front() != 0)
    bad_flags(input.describe(name) + ": a seqstart array must start with 0 (got [" +
              list_text(starts) + "])");
  for (size_t b = 1; b < starts.size(); ++b)
    if (starts[b] < starts[b - 1])
      bad_flags(input.describe(name) + ": entry " + std::to_string(b) + " (" +
                std::to_string(starts[b]) + ") is below the one before it");
  return starts;
}

// Group mode: seqstarts from files (which win) or from --seqlens-q/--seqlens-k; the two must
// agree when both are given.
void resolve_group(const RunOptions& o, InputDir* input, ProblemBuilder& builder) {
  if (o.seqlen_q || o.seqlen_k)
    bad_flags(
        "--seqlen-q/--seqlen-k describe batch mode; group mode takes --seqlens-q and "
        "--seqlens-k (comma separated)");
  auto from_file = [&](std::string_view name) -> std::optional<std::vector<int64_t>> {
    if (input && input->has(name)) return read_seqstart(*input, name);
    return std::nullopt;
  };
  auto from_flag = [&](const std::vector<int64_t>& lengths,
                       const std::string& flag) -> std::optional<std::vector<int64_t>> {
    if (lengths.empty()) return std::nullopt;
    return prefix_sums(lengths, flag);
  };
  auto pick = [&](std::string_view file, const std::vector<int64_t>& lengths,
                  const std::string& flag) -> std::optional<std::vector<int64_t>> {
    auto loaded = from_file(file);
    auto flagged = from_flag(lengths, flag);
    if (loaded && flagged && *loaded != *flagged)
      bad_flags(flag + " " + list_text(lengths) + " disagrees with " + input->describe(file) +
                " [" + list_text(*loaded) + "]");
    return loaded ? loaded : flagged;
  };
  auto seqstart_q = pick("seqstart_q.npy", o.seqlens_q, "--seqlens-q");
  if (!seqstart_q)
    bad_flags("--mode group needs --seqlens-q (comma separated) or seqstart_q.npy in --load");
  auto seqstart_k = pick("seqstart_k.npy", o.seqlens_k, "--seqlens-k");
  if (!seqstart_k) seqstart_k = seqstart_q;
  if (seqstart_k->size() != seqstart_q->size())
    bad_flags("group mode has " + std::to_string(seqstart_q->size() - 1) + " query sequences but " +
              std::to_string(seqstart_k->size() - 1) +
              " key sequences (--seqlens-k / seqstart_k.npy)");
  const int64_t batch = static_cast<int64_t>(seqstart_q->size()) - 1;
  if (o.batch && *o.batch != batch)
    bad_flags("--batch " + std::to_string(*o.batch) + " disagrees with the " +
              std::to_string(batch) + " sequences of group mode");
  builder.group(std::move(*seqstart_q), std::move(*seqstart_k));
}

void resolve_batch(const RunOptions& o, InputDir* input, ProblemBuilder& builder,
                   const Problem& partial) {
  if (!o.seqlens_q.empty()) bad_flags("--seqlens-q needs --mode group");
  const int64_t batch = o.batch.value_or(1);
  const int64_t seqlen_q = o.seqlen_q.value_or(kDefaultSeqlen);
  const int64_t seqlen_k = o.seqlen_k.value_or(seqlen_q);
  require_non_negative(batch, "--batch");
  require_non_negative(seqlen_q, "--seqlen-q");
  require_non_negative(seqlen_k, "--seqlen-k");
  builder.shape(batch, partial.nhead_q, partial.nhead_k, seqlen_q, seqlen_k, partial.hdim_q,
                partial.hdim_v);
  // Per-sequence valid key counts turn K/V into caches of capacity seqlen_k.
  std::vector<int64_t> key_lengths = o.seqlens_k;
  if (input && input->has("seqlen_k.npy")) {
    const auto loaded = input->read_integers("seqlen_k.npy");
    if (!key_lengths.empty() && key_lengths != loaded)
      bad_flags("--seqlens-k " + list_text(key_lengths) + " disagrees with " +
                input->describe("seqlen_k.npy") + " [" + list_text(loaded) + "]");
    key_lengths = loaded;
  }
  if (key_lengths.empty()) return;
  if (static_cast<int64_t>(key_lengths.size()) != batch)
    bad_flags("--seqlens-k has " + std::to_string(key_lengths.size()) +
              " entries in batch mode but --batch is " + std::to_string(batch));
  for (int64_t length : key_lengths) {
    require_non_negative(length, "--seqlens-k entry");
    if (length > seqlen_k)
      bad_flags("--seqlens-k entry " + std::to_string(length) + " exceeds the cache capacity " +
                "--seqlen-k " + std::to_string(seqlen_k));
  }
  builder.key_lengths(std::move(key_lengths));
}

void resolve_mask(const RunOptions& o, ProblemBuilder& builder) {
  if (o.causal && !o.window.empty())
    bad_flags("--causal and --window exclude each other (causal is --window -1,0)");
  if (o.causal) builder.causal(parse_enum<MaskAlign>(*o.causal));
  if (o.window_align && o.window.empty()) bad_flags("--window-align needs --window L,R");
  if (!o.window.empty())
    builder.window(o.window[0], o.window[1],
                   parse_enum<MaskAlign>(o.window_align.value_or("top_left")));
  if (o.sink_tokens != 0) builder.sink_tokens(o.sink_tokens);
}

// The bias kind from --bias or from the bias files of --load; both must agree.
BiasKind resolve_bias(const RunOptions& o, InputDir* input) {
  const bool bias_file = input && input->has("bias.npy");
  const bool alibi_file = input && input->has("alibi_slopes.npy");
  if (bias_file && alibi_file)
    bad_flags("--load " + input->path().string() +
              " holds both bias.npy and alibi_slopes.npy; keep one");
  const std::optional<BiasKind> from_flag =
      o.bias ? std::optional(parse_enum<BiasKind>(*o.bias)) : std::nullopt;
  const std::optional<BiasKind> from_file = bias_file    ? std::optional(BiasKind::elementwise)
                                            : alibi_file ? std::optional(BiasKind::alibi)
                                                         : std::nullopt;
  if (from_flag && from_file && *from_flag != *from_file)
    bad_flags("--bias " + *o.bias + " but --load holds " +
              (bias_file ? "bias.npy (elementwise)" : "alibi_slopes.npy (alibi)"));
  return from_flag.value_or(from_file.value_or(BiasKind::none));
}

std::optional<PageTableKind> page_table_flag(const RunOptions& o) {
  if (!o.page_table) return std::nullopt;
  return *o.page_table == "vllm" ? PageTableKind::vllm_block_table
                                 : PageTableKind::sglang_page_list;
}

// Page tables hold int32 page ids (as vLLM and SGLang keep them); a wider file entry must be
// refused here, since narrowing it would silently read another page.
int32_t page_id(int64_t value, const std::string& where) {
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max())
    bad_flags(where + " = " + std::to_string(value) +
              " does not fit the int32 page ids of a page table");
  return static_cast<int32_t>(value);
}

// A page table from --load, checked against the problem's batch.
void load_page_table(InputDir& input, PagedKv& paged, const Problem& problem) {
  if (paged.table == PageTableKind::vllm_block_table) {
    const io::NpyArray& table = input.read("block_table.npy");
    if (table.dtype != DType::int32 && table.dtype != DType::int64)
      bad_flags(input.describe("block_table.npy") + ": expected int32, got " +
                std::string(to_string(table.dtype)));
    if (table.shape.size() != 2 || table.shape[0] != problem.batch)
      bad_flags(input.describe("block_table.npy") + ": shape " + io::shape_string(table.shape) +
                " does not match the flags: expected [" + std::to_string(problem.batch) +
                ", max_pages] = [batch, max_pages]");
    paged.max_pages_per_seq = table.shape[1];
    const std::vector<int64_t> pages = npy_to_integers(table);
    for (size_t n = 0; n < pages.size(); ++n) {
      const auto row = static_cast<int64_t>(n) / std::max<int64_t>(table.shape[1], 1);
      const auto column = static_cast<int64_t>(n) - row * table.shape[1];
      paged.block_table.push_back(page_id(pages[n], input.describe("block_table.npy") + " entry [" +
                                                        std::to_string(row) + ", " +
                                                        std::to_string(column) + "]"));
    }
    return;
  }
  paged.page_indptr = input.read_integers("page_indptr.npy");
  if (static_cast<int64_t>(paged.page_indptr.size()) != problem.batch + 1)
    bad_flags(input.describe("page_indptr.npy") + ": " + std::to_string(paged.page_indptr.size()) +
              " entries, expected batch + 1 = " + std::to_string(problem.batch + 1));
  const std::vector<int64_t> pages = input.read_integers("page_indices.npy");
  for (size_t n = 0; n < pages.size(); ++n)
    paged.page_indices.push_back(page_id(
        pages[n], input.describe("page_indices.npy") + " entry [" + std::to_string(n) + "]"));
}

// A page table over a shuffled pool holding exactly the pages the key lengths need, so that
// logically adjacent pages are scattered in memory as in a real cache.
void shuffle_page_table(PagedKv& paged, const Problem& problem, uint64_t seed) {
  std::vector<int64_t> pages_of(problem.batch);
  int64_t total = 0, widest = 0;
  for (int64_t b = 0; b < problem.batch; ++b) {
    // Append-KV writes its new tokens behind the cached ones, so their pages must exist too.
    const int64_t keys = problem.key_length(b) + problem.append.seqlen_knew;
    pages_of[b] = (keys + paged.page_size - 1) / paged.page_size;
    total += pages_of[b];
    widest = std::max(widest, pages_of[b]);
  }
  // One page at least, so that unused table entries (0) still point into the pool.
  paged.num_pages = std::max<int64_t>(total, 1);
  std::vector<int32_t> order(paged.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::seed_seq seeds{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), 0x9a9e5u};
  std::mt19937_64 rng(seeds);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t next = 0;
  if (paged.table == PageTableKind::vllm_block_table) {
    paged.max_pages_per_seq = std::max<int64_t>(widest, 1);
    paged.block_table.assign(problem.batch * paged.max_pages_per_seq, 0);
    for (int64_t b = 0; b < problem.batch; ++b)
      for (int64_t p = 0; p < pages_of[b]; ++p)
        paged.block_table[b * paged.max_pages_per_seq + p] = order[next++];
    return;
  }
  paged.page_indptr.assign(1, 0);
  for (int64_t b = 0; b < problem.batch; ++b) {
    for (int64_t p = 0; p < pages_of[b]; ++p) paged.page_indices.push_back(order[next++]);
    paged.page_indptr.push_back(static_cast<int64_t>(paged.page_indices.size()));
  }
}

void resolve_paging(const RunOptions& o, InputDir* input, RunSpec& spec) {
  Problem& problem = spec.problem;
  const bool vllm_file = input && input->has("block_table.npy");
  const bool sglang_file =
      input && (input->has("page_indices.npy") || input->has("page_indptr.npy"));
  if (vllm_file && sglang_file)
    bad_flags("--load " + input->path().string() +
              " holds both block_table.npy and page_indices.npy; keep one page table");
  const std::optional<PageTableKind> from_file =
      vllm_file     ? std::optional(PageTableKind::vllm_block_table)
      : sglang_file ? std::optional(PageTableKind::sglang_page_list)
                    : std::nullopt;
  const std::optional<PageTableKind> from_flag = page_table_flag(o);
  if (from_flag && from_file && *from_flag != *from_file)
    bad_flags("--page-table " + *o.page_table + " but --load holds " +
              (vllm_file ? "block_table.npy (vllm)" : "page_indices.npy (sglang)"));
  std::optional<PageTableKind> table = from_flag ? from_flag : from_file;
  const bool needs_pages =
      problem.family == Family::fwd_pagedkv || problem.family == Family::batch_prefill;
  if (!table && needs_pages) table = PageTableKind::vllm_block_table;
  if (!table) {
    if (o.page_size || o.kv_layout)
      bad_flags(
          "--page-size/--kv-layout need a paged problem (--family fwd_pagedkv or "
          "batch_prefill, or --page-table)");
    return;
  }
  // The family as the user named it: a backward run's problem is bwd_dq_dk_dv whichever of
  // the three stages --family gave.
  if (!pages_allowed(problem.family))
    bad_flags(std::string(from_flag ? "--page-table" : "the page table of --load") +
              " needs a paged family (fwd_pagedkv, batch_prefill, fwd_splitkv, "
              "fwd_splitkv_combine or fwd_appendkv), not " +
              o.family);

  PagedKv& paged = problem.paged;
  paged.table = *table;
  paged.layout = parse_enum<KvLayout>(o.kv_layout.value_or("nhd"));
  paged.page_size = o.page_size.value_or(kDefaultPageSize);
  if (paged.page_size < 1)
    bad_flags("--page-size " + std::to_string(paged.page_size) + " must be at least 1");
  if (from_file) {
    spec.kv_pool_from_files = true;
    load_page_table(*input, paged, problem);
    const io::NpyArray& k = input->read("k.npy");
    if (k.shape.size() != 4 || k.shape[1] != paged.page_size)
      bad_flags(input->describe("k.npy") + ": shape " + io::shape_string(k.shape) +
                " is not a page pool [num_pages, page_size = " + std::to_string(paged.page_size) +
                ", nhead_k, hdim_q] (a page table came with it)");
    paged.num_pages = k.shape[0];
    return;
  }
  shuffle_page_table(paged, problem, spec.input_seed);
}

// fwd_appendkv: new tokens, RoPE, and the cached key counts (default: the cache minus room
// for the new tokens). The append flags are rejected for every other family.
void resolve_append(const RunOptions& o, ProblemBuilder& builder) {
  const Problem& partial = builder.peek();
  if (partial.family != Family::fwd_appendkv) {
    if (o.seqlen_knew || o.rope || o.rotary_dim || o.rotate_q)
      bad_flags("--seqlen-knew/--rope/--rotary-dim/--rotate-q need --family fwd_appendkv");
    return;
  }
  if (partial.mode != Mode::batch)
    bad_flags("--family fwd_appendkv runs in batch mode (caches of capacity --seqlen-k)");
  AppendKv append;
  append.seqlen_knew = o.seqlen_knew.value_or(partial.seqlen_q);
  require_non_negative(append.seqlen_knew, "--seqlen-knew");
  append.rope = parse_enum<RopeKind>(o.rope.value_or("none"));
  append.rotary_dim = o.rotary_dim.value_or(append.rope == RopeKind::none ? 0 : partial.hdim_q);
  require_non_negative(append.rotary_dim, "--rotary-dim");
  append.rotate_q = o.rotate_q;
  if (partial.seqlen_k_per_batch.empty())
    builder.key_lengths(std::vector<int64_t>(
        partial.batch, std::max<int64_t>(partial.seqlen_k - append.seqlen_knew, 0)));
  builder.append(std::move(append));
}

}  // namespace

int64_t total_keys(const Problem& problem) {
  return problem.seqstart_k.empty() ? 0 : problem.seqstart_k.back();
}

RunSpec resolve_run_spec(const RunOptions& o, InputDir* input) {
  if (o.backend != "gpu" && (o.validate || o.explain || o.pipeline))
    bad_flags("--validate, --explain and --pipeline need --backend gpu");
  RunSpec spec;
  spec.input_seed = o.input_seed;
  const Family family = parse_family(o.family);
  // fwd on the GPU is one engine call whose split request is --splits (0: the engine chooses);
  // the reference runs --splits N > 1 as its own split-KV stages.
  const bool engine_splits = o.backend == "gpu" && family == Family::fwd;
  const int64_t splits = o.splits.value_or(engine_splits ? 0 : 1);
  if (splits < (engine_splits ? 0 : 1))
    bad_flags("--splits " + std::to_string(splits) + " must be at least " +
              (engine_splits ? "0" : "1"));
  spec.stages = engine_splits ? RunStages::forward : stages_of(family, splits);
  spec.bhsd = o.layout == "bhsd";

  const Family main_family = spec.stages == RunStages::splitkv ? Family::fwd_splitkv : family;
  ProblemBuilder builder(spec.stages == RunStages::backward ? Family::bwd_dq_dk_dv : main_family);
  const DType dtype = parse_enum<DType>(o.dtype);
  builder.dtype(dtype);
  if (o.out_dtype) builder.out_dtype(parse_enum<DType>(*o.out_dtype));

  const int64_t nhead_k = o.nhead_k.value_or(o.nhead_q);
  const int64_t hdim_v = o.hdim_v.value_or(o.hdim_q);
  require_non_negative(o.nhead_q, "--nhead-q");
  require_non_negative(nhead_k, "--nhead-k");
  require_non_negative(o.hdim_q, "--hdim-q");
  require_non_negative(hdim_v, "--hdim-v");
  builder.shape(o.batch.value_or(1), o.nhead_q, nhead_k, 0, 0, o.hdim_q, hdim_v);

  const bool seqstart_files =
      input && (input->has("seqstart_q.npy") || input->has("seqstart_k.npy"));
  const Mode mode = o.mode ? parse_enum<Mode>(*o.mode) : seqstart_files ? Mode::group : Mode::batch;
  if (mode == Mode::batch && seqstart_files)
    bad_flags("--mode batch, but --load " + input->path().string() +
              " holds seqstart files, which define group mode");
  if (mode == Mode::group) {
    resolve_group(o, input, builder);
  } else {
    resolve_batch(o, input, builder, builder.peek());
  }

  resolve_append(o, builder);
  resolve_mask(o, builder);
  if (o.scale) builder.scale(*o.scale);
  if (o.softcap != 0.0) builder.softcap(o.softcap);
  if (o.dropout != 0.0) {
    builder.dropout(o.dropout, o.seed.value_or(0), o.offset.value_or(0));
  } else if (o.seed || o.offset) {
    bad_flags("--seed/--offset seed the dropout; they need --dropout P");
  }

  spec.problem = builder.peek();
  Problem& problem = spec.problem;
  problem.bias_kind = resolve_bias(o, input);
  if (o.sink_logit && !std::isfinite(*o.sink_logit))
    bad_flags("--sink-logit " + std::to_string(*o.sink_logit) + " must be finite");
  if (o.sink_logit || (input && input->has("sink_logits.npy")))
    spec.sink_logit = o.sink_logit.value_or(0.0);
  spec.want_lse = o.lse;
  // Backward reads the forward's LSE, so a backward run always computes it.
  problem.return_lse = o.lse || spec.stages == RunStages::backward;
  if (o.deterministic && spec.stages != RunStages::backward)
    bad_flags("--deterministic applies to the backward (--family bwd)");
  problem.bwd.deterministic = o.deterministic;
  problem.split.num_splits = splits;

  if (is_fp8(dtype)) {
    problem.fp8.kind = parse_enum<Fp8ScaleKind>(o.fp8_scale.value_or("per_tensor"));
  } else if (o.fp8_scale) {
    bad_flags("--fp8-scale " + *o.fp8_scale + " needs an fp8 --dtype, not " + o.dtype);
  } else if (input) {
    // Descales of a non-fp8 run would be ignored, so the data would not mean what its author
    // thought; refuse instead.
    for (const char* name : {"q_descale.npy", "k_descale.npy", "v_descale.npy",
                             "k_page_descale.npy", "v_page_descale.npy"})
      if (input->has(name))
        bad_flags(input->describe(name) + " is an fp8 descale, but --dtype " + o.dtype +
                  " is not fp8");
  }
  resolve_paging(o, input, spec);
  const bool quantizes = spec.stages == RunStages::append && is_fp8(dtype) &&
                         problem.fp8.kind == Fp8ScaleKind::per_page;
  if (o.new_dtype && !quantizes)
    bad_flags("--new-dtype " + *o.new_dtype +
              " applies to --family fwd_appendkv with an fp8 --dtype and --fp8-scale per_page "
              "(a quantizing append)");
  spec.new_dtype = quantizes ? parse_enum<DType>(o.new_dtype.value_or("bf16")) : dtype;
  return spec;
}

}  // namespace tilefmha::cli
