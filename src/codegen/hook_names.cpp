#include "codegen/hook_names.hpp"

namespace tilefmha::codegen {

std::string_view element_type(DType dtype) {
  switch (dtype) {
    case DType::fp16: return "tilefmha::tile::half_t";
    case DType::fp8_e4m3: return "tilefmha::tile::float_e4m3_t";
    case DType::fp8_e5m2: return "tilefmha::tile::float_e5m2_t";
    default: return "tilefmha::tile::bfloat16_t";
  }
}

std::string_view storage_type(DType dtype) {
  return dtype == DType::fp32 ? "float" : element_type(dtype);
}

std::string_view mask_hook(MaskKind mask) {
  return mask == MaskKind::none ? "tilefmha::fmha::NoMask" : "tilefmha::fmha::WindowMask";
}

std::string_view cap_hook(bool softcap) {
  return softcap ? "tilefmha::fmha::SoftCap" : "tilefmha::fmha::PlainScale";
}

std::string_view bias_hook(BiasKind bias) {
  switch (bias) {
    case BiasKind::elementwise: return "tilefmha::fmha::ElementwiseBias";
    case BiasKind::alibi: return "tilefmha::fmha::AlibiBias";
    case BiasKind::none: break;
  }
  return "tilefmha::fmha::NoBias";
}

std::string_view dropout_hook(bool dropout) {
  return dropout ? "tilefmha::fmha::PhiloxDropout" : "tilefmha::fmha::NoDropout";
}

const char* boolean(bool value) {
  return value ? "true" : "false";
}

std::string padding_arguments(const KernelConfig& c) {
  std::string text;
  text.append("    /*group_mode=*/").append(boolean(c.mode == Mode::group)).append(",\n");
  text.append("    /*pad_seqlen_q=*/")
      .append(boolean(c.pad_seqlen_q))
      .append(", /*pad_seqlen_k=*/")
      .append(boolean(c.pad_seqlen_k))
      .append(",\n");
  text.append("    /*pad_hdim_q=*/")
      .append(boolean(c.pad_hdim_q))
      .append(", /*pad_hdim_v=*/")
      .append(boolean(c.pad_hdim_v))
      .append(",\n");
  return text;
}

std::string feature_hook_arguments(const KernelConfig& c) {
  std::string text;
  text.append("    ").append(mask_hook(c.mask)).append(",\n");
  text.append("    tilefmha::fmha::Logits<")
      .append(cap_hook(c.softcap))
      .append(", ")
      .append(bias_hook(c.bias))
      .append(">,\n");
  text.append("    ").append(dropout_hook(c.dropout)).append(",\n");
  text.append("    /*store_lse=*/")
      .append(boolean(c.lse))
      .append(", /*sink_logit=*/")
      .append(boolean(c.sink_logit));
  return text;
}

}  // namespace tilefmha::codegen
