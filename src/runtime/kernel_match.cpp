#include "runtime/kernel_match.hpp"

#include <sstream>

#include "enumerate/family_traits.hpp"
#include "runtime/heuristics.hpp"
#include "templates/template_table.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

template <class T>
Rejection mismatch(std::string_view field, T kernel, T problem) {
  std::ostringstream out;
  if constexpr (std::is_enum_v<T>) {
    out << field << ": kernel " << to_string(kernel) << ", problem " << to_string(problem);
  } else if constexpr (std::is_same_v<T, bool>) {
    out << field << ": kernel " << (kernel ? "has it" : "lacks it") << ", problem "
        << (problem ? "needs it" : "does not use it");
  } else {
    out << field << ": kernel " << kernel << ", problem " << problem;
  }
  return {std::string(field), out.str()};
}

// The mask kind a kernel needs: sink tokens only exist under a window.
MaskKind required_mask(const Problem& problem) {
  if (problem.mask.kind == MaskKind::causal && problem.mask.sink_tokens > 0)
    return MaskKind::window;
  return problem.mask.kind;
}

// Whether any sequence of the problem is not a multiple of `block`, or lengths vary per batch.
bool needs_seq_padding(const Problem& problem, int64_t length, int32_t block) {
  if (problem.mode == Mode::group || problem.has_key_lengths()) return true;
  return block <= 0 || length % block != 0;
}

// The dtype a stage's kernel writes: append-KV writes the cache in the new tokens' dtype, whatever
// O's (an fp8 append -> attend problem has a bf16 or fp32 O, which the attention writes).
DType stage_out_dtype(const Problem& problem, Family stage) {
  return stage == Family::fwd_appendkv ? problem.dtype : problem.out_dtype;
}

// The value of trait `field` that `problem` needs, spelled as the field table spells it.
FieldValue required_trait(const Problem& p, std::string_view field) {
  auto name = [](auto value) { return FieldValue(std::string(to_string(value))); };
  if (field == "mode") return name(p.mode);
  if (field == "mask") return name(required_mask(p));
  if (field == "bias") return name(p.bias_kind);
  if (field == "lse") return p.return_lse;
  if (field == "dropout") return p.has_dropout();
  if (field == "softcap") return p.softcap > 0;
  if (field == "sink_logit") return !p.sink_logits.empty();
  if (field == "page_table") return name(p.paged.table);
  if (field == "page_size") return p.paged.page_size;
  if (field == "kv_layout") return name(p.paged.layout);
  if (field == "rope") return name(p.append.rope);
  if (field == "fp8_scale") return name(p.fp8.kind);
  if (field == "deterministic") return p.bwd.deterministic;
  if (field == "dbias") return !p.bwd.dbias.empty();
  throw Error(ErrorKind::invalid_argument,
              "no problem trait for field '" + std::string(field) + "'");
}

// Compares only the traits the stage's family carries (the others stay at their defaults in
// every kernel of that family, e.g. a combine kernel has no page table even for paged problems).
std::optional<Rejection> trait_rejection(const KernelConfig& config, const Problem& problem,
                                         Family stage) {
  for (std::string_view field : enumerate::trait_fields()) {
    if (!enumerate::family_carries(stage, field)) continue;
    const FieldValue kernel = get_field(config, field);
    const FieldValue needed = required_trait(problem, field);
    if (kernel == needed) continue;
    // A window kernel also serves causal problems (causal is window(-1, 0)).
    if (field == "mask" && kernel == FieldValue(std::string("window")) &&
        needed == FieldValue(std::string("causal")))
      continue;
    if (field == "page_size" && kernel == FieldValue(int64_t{0})) continue;  // any page size
    return Rejection{std::string(field), std::string(field) + ": kernel " +
                                             field_to_string(kernel) + ", problem " +
                                             field_to_string(needed)};
  }
  return std::nullopt;
}

}  // namespace

std::vector<Family> stage_families(const Problem& problem) {
  switch (problem.family) {
    case Family::fwd_splitkv: return {Family::fwd_splitkv, Family::fwd_splitkv_combine};
    case Family::bwd_dot_do_o:
    case Family::bwd_dq_dk_dv:
    case Family::bwd_convert_dq:
      return {Family::bwd_dot_do_o, Family::bwd_dq_dk_dv, Family::bwd_convert_dq};
    default: return {problem.family};
  }
}

std::optional<Rejection> match_rejection(const KernelConfig& config, const Problem& problem,
                                         Family stage, Arch arch) {
  if (config.family != stage) return mismatch("family", config.family, stage);
  // A cubin runs only on its own major architecture, at its minor version or newer.
  if (config.arch > arch || (config.arch == Arch::sm90) != (arch == Arch::sm90))
    return mismatch("arch", config.arch, arch);
  if (config.pipeline == Pipeline::sm90_ws && arch != Arch::sm90)
    return Rejection{"pipeline",
                     "pipeline: sm90_ws needs sm90, device is " + std::string(to_string(arch))};
  if (problem.accumulate && config.pipeline != Pipeline::sm90_ws)
    return Rejection{"pipeline",
                     "pipeline: accumulate = true merges into O in the sm90_ws "
                     "epilogue only, kernel is " +
                         std::string(to_string(config.pipeline))};
  if (config.dtype != problem.dtype) return mismatch("dtype", config.dtype, problem.dtype);
  if (config.out_dtype != stage_out_dtype(problem, stage))
    return mismatch("out_dtype", config.out_dtype, stage_out_dtype(problem, stage));

  const bool attention = enumerate::is_attention_family(stage);
  const int64_t hdim_v = problem.hdim_v;
  if (config.hdim_q < problem.hdim_q)
    return mismatch<int64_t>("hdim_q", config.hdim_q, problem.hdim_q);
  if (config.hdim_v < hdim_v) return mismatch<int64_t>("hdim_v", config.hdim_v, hdim_v);
  if (config.hdim_q != problem.hdim_q && !config.pad_hdim_q)
    return Rejection{"pad_hdim_q", "pad_hdim_q: kernel hdim_q " + std::to_string(config.hdim_q) +
                                       " needs head-dim padding for problem hdim_q " +
                                       std::to_string(problem.hdim_q)};
  if (config.hdim_v != hdim_v && !config.pad_hdim_v)
    return Rejection{"pad_hdim_v", "pad_hdim_v: kernel hdim_v " + std::to_string(config.hdim_v) +
                                       " needs head-dim padding for problem hdim_v " +
                                       std::to_string(hdim_v)};
  // sm90_ws pads by TMA's zero fill and stores varlen rows in 16-byte chunks: whole chunks only.
  if (config.pipeline == Pipeline::sm90_ws && config.pad_hdim_q &&
      (problem.hdim_q % 8 != 0 || hdim_v % 8 != 0))
    return Rejection{"pad_hdim_q",
                     "pad_hdim_q: sm90_ws pads head dims that are multiples of 8, problem has " +
                         std::to_string(problem.hdim_q) + "/" + std::to_string(hdim_v)};
  if (attention) {
    if (!config.pad_seqlen_q && needs_seq_padding(problem, problem.seqlen_q, config.block_m))
      return Rejection{"pad_seqlen_q",
                       "pad_seqlen_q: seqlen_q " + std::to_string(problem.seqlen_q) +
                           " is ragged for block_m " + std::to_string(config.block_m)};
    if (!config.pad_seqlen_k && needs_seq_padding(problem, problem.seqlen_k, config.block_n))
      return Rejection{"pad_seqlen_k",
                       "pad_seqlen_k: seqlen_k " + std::to_string(problem.seqlen_k) +
                           " is ragged for block_n " + std::to_string(config.block_n)};
  }
  return trait_rejection(config, problem, stage);
}

std::optional<std::string> rejection_reason(const KernelConfig& config, const Problem& problem,
                                            Family stage, Arch arch) {
  if (auto rejection = match_rejection(config, problem, stage, arch)) return rejection->text;
  return std::nullopt;
}

std::optional<Rejection> dispatch_rejection(const KernelConfig& config, const Problem& problem,
                                            Family stage, Arch arch) {
  std::optional<Rejection> rejection = match_rejection(config, problem, stage, arch);
  if (!rejection) rejection = templates::build_rejection(config);
  if (rejection) return rejection;
  const KernelConfig launched = launch_form(config, problem);
  if (auto refused = templates::build_rejection(launched)) return refused;
  return templates::find_kernel_template(config.family, config.pipeline)
      ->can_implement(launched, problem);
}

int match_depth(const std::string& rejection) {
  return field_depth(std::string_view(rejection).substr(0, rejection.find(':')));
}

int field_depth(std::string_view field) {
  // The order in which match_rejection checks fields: shape fields, the traits, then what the
  // kernel template refuses (any of its config fields, or the problem's limits).
  static constexpr std::string_view kShapeChecks[] = {
      "family", "arch",       "pipeline",   "dtype",        "out_dtype",   "hdim_q",
      "hdim_v", "pad_hdim_q", "pad_hdim_v", "pad_seqlen_q", "pad_seqlen_k"};
  int depth = 0;
  for (std::string_view check : kShapeChecks) {
    if (check == field) return depth;
    ++depth;
  }
  for (std::string_view check : enumerate::trait_fields()) {
    if (check == field) return depth;
    ++depth;
  }
  if (has_kernel_config_field(field) || field == "codegen") return depth;
  // Problem limits a template's can_implement refuses (templates/gpu_limits.hpp, the sm90 scale
  // sign): the kernel matched every trait, so it is the closest candidate of all.
  static constexpr std::string_view kProblemLimits[] = {
      "softmax_scale", "seqlen_q", "seqlen_k", "q.shape", "k.shape", "v.shape", "o.shape"};
  for (std::string_view limit : kProblemLimits)
    if (limit == field) return depth + 1;
  return -1;
}

}  // namespace tilefmha::runtime
