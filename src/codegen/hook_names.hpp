// How generated sources spell a KernelConfig: the element types and feature hooks of kernels/fmha
// as the forward pipelines' traits templates take them. One spelling for every pipeline, so the
// hooks a config selects read the same in each kernel's translation unit.
#pragma once

#include <string>
#include <string_view>

#include "tilefmha/kernel_config.hpp"

namespace tilefmha::codegen {

// The 16-bit or fp8 element type (fp16, bf16, fp8_e4m3 or fp8_e5m2; the caller has checked the
// dtype).
std::string_view element_type(DType dtype);
// The device type of an fp32, fp16, bf16 or fp8 tensor (the caller has checked the dtype).
std::string_view storage_type(DType dtype);

// A window kernel serves causal problems too (causal is window(-1, 0) with runtime bounds).
std::string_view mask_hook(MaskKind mask);
std::string_view cap_hook(bool softcap);
std::string_view bias_hook(BiasKind bias);
std::string_view dropout_hook(bool dropout);
const char* boolean(bool value);

// The group-mode and padding traits arguments of the kernels that predicate their loads
// (sm80_mma, simt_f32): one line each, indented for the traits list, each ending in ",\n".
std::string padding_arguments(const KernelConfig& config);

// The traits arguments every forward kernel takes after its tile and padding: the mask, the
// logits (softcap and bias), the dropout, then store_lse and sink_logit. One line each, indented
// for the traits list, with no separator after the last.
std::string feature_hook_arguments(const KernelConfig& config);

}  // namespace tilefmha::codegen
