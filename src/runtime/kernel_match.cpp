#include "runtime/kernel_match.hpp"

#include <sstream>

namespace tilefmha::runtime {
namespace {

template <class T>
std::string mismatch(std::string_view field, T kernel, T problem) {
  std::ostringstream out;
  if constexpr (std::is_enum_v<T>) {
    out << field << ": kernel " << to_string(kernel) << ", problem " << to_string(problem);
  } else if constexpr (std::is_same_v<T, bool>) {
    out << field << ": kernel " << (kernel ? "has it" : "lacks it") << ", problem "
        << (problem ? "needs it" : "does not use it");
  } else {
    out << field << ": kernel " << kernel << ", problem " << problem;
  }
  return out.str();
}

// The mask kind a kernel needs: sink tokens only exist under a window.
MaskKind required_mask(const Problem& problem) {
  if (problem.mask.kind == MaskKind::causal && problem.mask.sink_tokens > 0)
    return MaskKind::window;
  return problem.mask.kind;
}

// Whether any sequence of the problem is not a multiple of `block`, or lengths vary per batch.
bool needs_seq_padding(const Problem& problem, int64_t length, int32_t block) {
  if (problem.mode == Mode::group || !problem.seqlen_k_per_batch.empty()) return true;
  return block <= 0 || length % block != 0;
}

bool is_attention_stage(Family stage) {
  return stage == Family::fwd || stage == Family::fwd_splitkv || stage == Family::fwd_pagedkv ||
         stage == Family::batch_prefill || stage == Family::bwd_dq_dk_dv;
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

std::optional<std::string> rejection_reason(const KernelConfig& config, const Problem& problem,
                                            Family stage, Arch arch) {
  if (config.family != stage) return mismatch("family", config.family, stage);
  // A cubin runs only on its own major architecture, at its minor version or newer.
  if (config.arch > arch || (config.arch == Arch::sm90) != (arch == Arch::sm90))
    return mismatch("arch", config.arch, arch);
  if (config.pipeline == Pipeline::sm90_ws && arch != Arch::sm90)
    return "pipeline: sm90_ws needs sm90, device is " + std::string(to_string(arch));
  if (config.dtype != problem.dtype) return mismatch("dtype", config.dtype, problem.dtype);
  if (config.out_dtype != problem.out_dtype)
    return mismatch("out_dtype", config.out_dtype, problem.out_dtype);
  if (config.mode != problem.mode) return mismatch("mode", config.mode, problem.mode);

  const bool attention = is_attention_stage(stage);
  const int64_t hdim_v = problem.hdim_v;
  if (config.hdim_q < problem.hdim_q)
    return mismatch<int64_t>("hdim_q", config.hdim_q, problem.hdim_q);
  if (config.hdim_v < hdim_v) return mismatch<int64_t>("hdim_v", config.hdim_v, hdim_v);
  if (config.hdim_q != problem.hdim_q && !config.pad_hdim_q)
    return "pad_hdim_q: kernel hdim_q " + std::to_string(config.hdim_q) +
           " needs head-dim padding for problem hdim_q " + std::to_string(problem.hdim_q);
  if (config.hdim_v != hdim_v && !config.pad_hdim_v)
    return "pad_hdim_v: kernel hdim_v " + std::to_string(config.hdim_v) +
           " needs head-dim padding for problem hdim_v " + std::to_string(hdim_v);
  if (attention) {
    if (!config.pad_seqlen_q && needs_seq_padding(problem, problem.seqlen_q, config.block_m))
      return "pad_seqlen_q: seqlen_q " + std::to_string(problem.seqlen_q) +
             " is ragged for block_m " + std::to_string(config.block_m);
    if (!config.pad_seqlen_k && needs_seq_padding(problem, problem.seqlen_k, config.block_n))
      return "pad_seqlen_k: seqlen_k " + std::to_string(problem.seqlen_k) +
             " is ragged for block_n " + std::to_string(config.block_n);
    const MaskKind mask = required_mask(problem);
    // A window kernel also serves causal problems (causal is window(-1, 0)).
    const bool mask_ok =
        config.mask == mask || (config.mask == MaskKind::window && mask == MaskKind::causal);
    if (!mask_ok) return mismatch("mask", config.mask, mask);
    if (config.bias != problem.bias_kind) return mismatch("bias", config.bias, problem.bias_kind);
    if (config.softcap != (problem.softcap > 0))
      return mismatch("softcap", config.softcap, problem.softcap > 0);
    if (config.dropout != problem.has_dropout())
      return mismatch("dropout", config.dropout, problem.has_dropout());
    if (stage != Family::bwd_dq_dk_dv) {
      if (config.lse != problem.return_lse && stage != Family::fwd_splitkv)
        return mismatch("lse", config.lse, problem.return_lse);
      if (config.sink_logit != !problem.sink_logits.empty() && stage != Family::fwd_splitkv)
        return mismatch("sink_logit", config.sink_logit, !problem.sink_logits.empty());
    }
  }
  if (stage == Family::fwd_splitkv_combine) {
    if (config.lse != problem.return_lse) return mismatch("lse", config.lse, problem.return_lse);
    if (config.sink_logit != !problem.sink_logits.empty())
      return mismatch("sink_logit", config.sink_logit, !problem.sink_logits.empty());
  }
  if (config.page_table != problem.paged.table)
    return mismatch("page_table", config.page_table, problem.paged.table);
  if (problem.is_paged()) {
    if (config.page_size != 0 && config.page_size != problem.paged.page_size)
      return mismatch<int64_t>("page_size", config.page_size, problem.paged.page_size);
    if (config.kv_layout != problem.paged.layout)
      return mismatch("kv_layout", config.kv_layout, problem.paged.layout);
  }
  if (stage == Family::fwd_appendkv && config.rope != problem.append.rope)
    return mismatch("rope", config.rope, problem.append.rope);
  if (config.fp8_scale != problem.fp8.kind)
    return mismatch("fp8_scale", config.fp8_scale, problem.fp8.kind);
  if (stage == Family::bwd_dq_dk_dv) {
    if (config.deterministic != problem.bwd.deterministic)
      return mismatch("deterministic", config.deterministic, problem.bwd.deterministic);
    if (config.dbias != !problem.bwd.dbias.empty())
      return mismatch("dbias", config.dbias, !problem.bwd.dbias.empty());
  }
  return std::nullopt;
}

int match_depth(const std::string& rejection) {
  // The order in which rejection_reason checks fields; codegen support is checked last.
  static constexpr std::string_view kCheckOrder[] = {
      "family",     "arch",      "pipeline",   "dtype",      "out_dtype",    "mode",
      "hdim_q",     "hdim_v",    "pad_hdim_q", "pad_hdim_v", "pad_seqlen_q", "pad_seqlen_k",
      "mask",       "bias",      "softcap",    "dropout",    "lse",          "sink_logit",
      "page_table", "page_size", "kv_layout",  "rope",       "fp8_scale",    "deterministic",
      "dbias",      "codegen"};
  const std::string_view field = std::string_view(rejection).substr(0, rejection.find(':'));
  for (size_t i = 0; i < std::size(kCheckOrder); ++i)
    if (kCheckOrder[i] == field) return static_cast<int>(i);
  return -1;
}

}  // namespace tilefmha::runtime
