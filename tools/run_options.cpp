#include "run_options.hpp"

#include <charconv>
#include <sstream>
#include <string_view>
#include <system_error>

#include "tilefmha/types.hpp"

namespace tilefmha::cli {
namespace {

template <class E>
std::vector<std::string> names_of() {
  std::vector<std::string> names;
  for (std::string_view name : EnumNames<E>::names) names.emplace_back(name);
  return names;
}

std::vector<std::string> attention_dtype_names() {
  std::vector<std::string> names;
  for (std::string_view name : EnumNames<DType>::names)
    if (is_attention_dtype(parse_enum<DType>(name))) names.emplace_back(name);
  return names;
}

template <class T>
CLI::Option* add_optional(CLI::App& command, const std::string& name, std::optional<T>& slot,
                          const std::string& help) {
  return command.add_option_function<T>(
      name, [&slot](const T& value) { slot = value; }, help);
}

// A comma-separated list of integers ("3,5,0"), checked for `count` entries when count > 0.
std::vector<int64_t> parse_list(const std::string& text, const std::string& flag, size_t count) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw CLI::ValidationError(flag, "'" + item + "' in '" + text + "' is not an integer");
    values.push_back(value);
  }
  if (values.empty()) throw CLI::ValidationError(flag, "needs at least one value");
  if (count > 0 && values.size() != count)
    throw CLI::ValidationError(
        flag, "'" + text + "' needs exactly " + std::to_string(count) + " comma-separated values");
  return values;
}

// An unsigned 64-bit flag value. CLI11 would wrap "-1" to 2^64 - 1 and saturate values past
// 2^64 - 1; seeds and offsets must reproduce exactly what was asked, so both are refused.
template <class Slot>
CLI::Option* add_u64(CLI::App& command, const std::string& flag, Slot& slot,
                     const std::string& help) {
  return command
      .add_option_function<std::string>(
          flag,
          [&slot, flag](const std::string& text) {
            uint64_t value = 0;
            const char* end = text.data() + text.size();
            const auto [ptr, error] = std::from_chars(text.data(), end, value);
            if (error == std::errc::result_out_of_range)
              throw CLI::ValidationError(flag, "'" + text + "' exceeds 2^64 - 1");
            if (error != std::errc() || ptr != end || text.empty())
              throw CLI::ValidationError(flag, "'" + text + "' is not an integer in [0, 2^64 - 1]");
            slot = value;
          },
          help)
      ->type_name("UINT64");
}

// CLI11 converts integers with strtoll, which saturates a value past int64 at 2^63 - 1 (or
// -2^63): --batch 2^70 became a batch of 2^63 - 1, which with --seqlen-q 0 ran for ever. Such
// values are refused before CLI11 converts them; everything else is CLI11's to convert.
const CLI::Validator& int64_range() {
  static const CLI::Validator validator(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        const auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc::result_out_of_range)
          return "'" + text + "' is outside the int64 range";
        return {};
      },
      "");
  return validator;
}

CLI::Option* add_list(CLI::App& command, const std::string& flag, std::vector<int64_t>& slot,
                      const std::string& type_name, const std::string& help, size_t count = 0) {
  return command
      .add_option_function<std::string>(
          flag,
          [&slot, flag, count](const std::string& text) { slot = parse_list(text, flag, count); },
          help)
      ->type_name(type_name);
}

// The file contract: outside tools and tests rely on it (docs/cli.md says the same).
constexpr std::string_view kFileContract = R"(
Files (--load DIR reads them, --save DIR writes them):
  NumPy .npy, little-endian, C order. Data tensors are float32 ('<f4'); on load they are
  rounded to the problem's dtype (--dtype), so saved inputs reload bit for bit.
  q.npy, k.npy, v.npy    [batch, seq, head, dim]; group mode [total_tokens, head, dim]
                         (logical order whatever --layout says)
  seqstart_q.npy, seqstart_k.npy
                         int32/int64 [batch + 1] prefix sums; when present they define
                         group mode (and override --seqlens-q/--seqlens-k)
  bias.npy               [batch, nhead_q, seqlen_q, seqlen_k]; present => --bias elementwise
  alibi_slopes.npy       [nhead_q]; present => --bias alibi
  sink_logits.npy        [nhead_q]; present => per-head sink logits
  block_table.npy        int32 [batch, max_pages]; present => vLLM paged KV: k.npy/v.npy then
                         hold the page pool [num_pages, page_size, nhead_k, dim] (NHD order)
  page_indptr.npy, page_indices.npy
                         int32/int64 [batch + 1] and [pages]: the SGLang form of the same
  q_descale.npy, k_descale.npy, v_descale.npy
                         fp8 only: [] for per_tensor, [batch, head, ceil(seq / 128)] for
                         per_block (absent: 1); q/k/v.npy then hold the fp8 code values
  k_page_descale.npy, v_page_descale.npy
                         fp8 per_page: [num_pages, nhead_k] page scales (absent: 1); Q then
                         takes q_descale.npy ([])
  do.npy                 backward: dO, like o.npy (absent: random)
  k_new.npy, v_new.npy   fwd_appendkv: [batch, seqlen_knew, nhead_k, dim] new tokens; k.npy and
                         v.npy are the caches before the append ([batch, seqlen_k, ...] with
                         seqlen_k.npy / --seqlens-k cached lengths, default seqlen_k - knew)
  rope_cos.npy, rope_sin.npy
                         fwd_appendkv: [positions, rotary_dim / 2] (absent: base 10000)
  outputs: o.npy (like q.npy, hdim_v), lse.npy [batch, nhead_q, seqlen_q] (group mode
  [nhead_q, total_tokens]; with --lse), dq.npy, dk.npy, dv.npy (backward, like
  q/k/v), dbias.npy (backward with an elementwise bias), k_appended.npy, v_appended.npy
  (fwd_appendkv: the caches after the append, like k/v.npy), q_rotated.npy (--rotate-q) and
  k_page_descale_appended.npy, v_page_descale_appended.npy (a quantizing append's scales)
  --save also writes every input, so a saved DIR reloads (--load DIR, same flags) to the same
  outputs; the DIR is filled only after the run succeeded.
Without --load, inputs are uniform random in [-1, 1) from --input-seed; paged problems
scatter K/V into a shuffled page pool.
Exit codes: 0 success; 2 bad flag, missing or mismatching file, invalid problem (nothing is
written); 1 other failures.)";

}  // namespace

void add_run_options(CLI::App& command, RunOptions& o) {
  auto families = names_of<Family>();
  families.emplace_back("bwd");
  command
      .add_option("--family", o.family,
                  "Kernel family (bwd = the three backward stages after a forward)")
      ->check(CLI::IsMember(families))
      ->capture_default_str();
  command.add_option("--dtype", o.dtype, "Q/K/V element type")
      ->check(CLI::IsMember(attention_dtype_names()))
      ->capture_default_str();
  add_optional(command, "--out-dtype", o.out_dtype,
               "O (and dQ/dK/dV) element type [default: --dtype; bf16 for fp8]")
      ->check(CLI::IsMember(attention_dtype_names()));
  add_optional(command, "-b,--batch", o.batch, "Batch size [default: 1]")->check(int64_range());
  command.add_option("--nhead-q", o.nhead_q, "Query heads")
      ->check(int64_range())
      ->capture_default_str();
  add_optional(command, "--nhead-k", o.nhead_k, "Key/value heads (GQA/MQA) [default: nhead-q]")
      ->check(int64_range());
  add_optional(command, "--seqlen-q", o.seqlen_q,
               "Query length (batch mode) [default: " + std::to_string(kDefaultSeqlen) + "]")
      ->check(int64_range());
  add_optional(command, "--seqlen-k", o.seqlen_k, "Key length (batch mode) [default: seqlen-q]")
      ->check(int64_range());
  command.add_option("--hdim-q", o.hdim_q, "Head dim of Q and K")
      ->check(int64_range())
      ->capture_default_str();
  add_optional(command, "--hdim-v", o.hdim_v, "Head dim of V and O [default: hdim-q]")
      ->check(int64_range());
  command.add_option("--layout", o.layout, "Memory order of Q/K/V/O")
      ->check(CLI::IsMember({"bshd", "bhsd"}))
      ->capture_default_str();
  add_optional(command, "--mode", o.mode,
               "batch, or group (varlen; needs --seqlens-q or seqstart files) [default: batch]")
      ->check(CLI::IsMember(names_of<Mode>()));
  add_list(command, "--seqlens-q", o.seqlens_q, "N,N,...",
           "Group mode: query length of each sequence");
  add_list(command, "--seqlens-k", o.seqlens_k, "N,N,...",
           "Key length of each sequence (group mode; in batch mode: valid keys per sequence of "
           "a KV cache) [default: seqlens-q]");

  add_optional(command, "--causal", o.causal, "Causal mask aligned top_left or bottom_right")
      ->check(CLI::IsMember(names_of<MaskAlign>()));
  add_list(command, "--window", o.window, "L,R", "Sliding window (-1 = unbounded)", 2);
  add_optional(command, "--window-align", o.window_align,
               "Alignment of --window [default: top_left]")
      ->check(CLI::IsMember(names_of<MaskAlign>()));
  command.add_option("--sink-tokens", o.sink_tokens, "Keys kept visible under a window")
      ->check(int64_range())
      ->capture_default_str();
  add_optional(command, "--scale", o.scale, "Softmax scale [default: 1/sqrt(hdim-q)]");
  command.add_option("--softcap", o.softcap, "Logit soft cap (0 = off)")->capture_default_str();
  add_optional(command, "--bias", o.bias, "Additive bias: elementwise or alibi")
      ->check(CLI::IsMember({"elementwise", "alibi"}));
  add_optional(command, "--sink-logit", o.sink_logit,
               "Learnable sink logit of every head (sink_logits.npy overrides)");
  command.add_flag("--lse", o.lse, "Also return and save the log-sum-exp");
  command.add_flag("--deterministic", o.deterministic,
                   "Backward: bitwise-reproducible dQ (no atomics ordering on the GPU)");

  command.add_option("--dropout", o.dropout, "Dropout probability")->capture_default_str();
  add_u64(command, "--seed", o.seed, "Dropout seed, 0..2^64-1 [default: 0]");
  add_u64(command, "--offset", o.offset, "Dropout Philox offset, 0..2^64-1 [default: 0]");

  add_optional(command, "--splits", o.splits,
               "Split-KV: partials over N key chunks, then the combine (forward only) [default: "
               "1]. For fwd on the GPU, the engine's request: 0 = it chooses, 1 = one pass, "
               "N = N splits [default: 0]")
      ->check(int64_range());
  add_optional(command, "--page-table", o.page_table,
               "Paged KV form: vllm (block table) or sglang (page list) [default: vllm for "
               "fwd_pagedkv and batch_prefill]")
      ->check(CLI::IsMember({"vllm", "sglang"}));
  add_optional(command, "--page-size", o.page_size,
               "Tokens per KV page [default: " + std::to_string(kDefaultPageSize) + "]")
      ->check(int64_range());
  add_optional(command, "--kv-layout", o.kv_layout, "Paged cache memory order [default: nhd]")
      ->check(CLI::IsMember(names_of<KvLayout>()));
  add_optional(command, "--fp8-scale", o.fp8_scale,
               "FP8 descale granularity (fp8 dtypes): per_tensor, per_block (128 tokens of a "
               "head) or per_page (paged caches: K and V per page and KV head, Q per tensor; "
               "fwd_appendkv then quantizes 16-bit new tokens and updates the scales) "
               "[default: per_tensor]")
      ->check(CLI::IsMember({"per_tensor", "per_block", "per_page"}));
  add_optional(command, "--new-dtype", o.new_dtype,
               "fwd_appendkv with an fp8 --dtype and --fp8-scale per_page: the new tokens' type "
               "[default: bf16]")
      ->check(CLI::IsMember({"fp16", "bf16"}));

  add_optional(command, "--seqlen-knew", o.seqlen_knew,
               "fwd_appendkv: new K/V tokens per sequence [default: seqlen-q]")
      ->check(int64_range());
  add_optional(command, "--rope", o.rope, "fwd_appendkv: RoPE on new K [default: none]")
      ->check(CLI::IsMember(names_of<RopeKind>()));
  add_optional(command, "--rotary-dim", o.rotary_dim,
               "fwd_appendkv: rotated leading dims [default: hdim-q]")
      ->check(int64_range());
  command.add_flag("--rotate-q", o.rotate_q, "fwd_appendkv: also rotate Q (in place)");

  command
      .add_option("--backend", o.backend,
                  "cpu (the reference), gpu, or auto (gpu where one is usable and the family is "
                  "fwd, else cpu)")
      ->check(CLI::IsMember({"cpu", "gpu", "auto"}))
      ->capture_default_str();
  command.add_flag("--validate", o.validate,
                   "gpu: compare every output element with the CPU reference; exit 1 when an "
                   "element is outside atol + rtol*|ref| (bf16 1.6e-2, fp16 2e-3, fp32 2e-5; "
                   "LSE 1e-3 + 1e-4*|ref|; fp8 inputs: O's atol plus 2^-4*max|dequantized V| "
                   "(P is rounded to e4m3), LSE 2e-3 + 2^-9*|ref|)");
  command.add_flag("--explain", o.explain, "gpu: print which kernel each stage uses and why");
  add_optional(command, "--pipeline", o.pipeline,
               "gpu: consider only kernels of this pipeline (sm80_mma, sm90_ws, simt_f32) "
               "[default: the dispatcher's best fit]")
      ->check(CLI::IsMember(names_of<Pipeline>()));
  add_u64(command, "--input-seed", o.input_seed,
          "Seed of the random inputs, 0..2^64-1 [default: 0]");
  add_optional(command, "--load", o.load_dir, "Read inputs from DIR (see Files below)")
      ->type_name("DIR");
  add_optional(command, "--save", o.save_dir, "Write inputs and outputs to DIR")->type_name("DIR");
  add_optional(command, "--threads", o.threads,
               "CPU worker threads [default: $TILEFMHA_THREADS, else every core]")
      ->check(CLI::Range(1, 4096));
  command.footer(std::string(kFileContract));
}

}  // namespace tilefmha::cli
