// The support checks' refusal: Error(not_supported) whose message names the field, its value and
// why no kernel template implements it, e.g. "block_n = 40: must be a multiple of 16 in 16..128";
// and the checks every forward pipeline shares.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "tilefmha/error.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::codegen {

template <class T>
[[noreturn]] void unsupported(std::string_view field, T value, std::string_view why) {
  std::ostringstream message;
  if constexpr (std::is_enum_v<T>)
    message << field << " = " << to_string(value) << ": " << why;
  else if constexpr (std::is_same_v<T, bool>)
    message << field << " = " << (value ? "true" : "false") << ": " << why;
  else
    message << field << " = " << value << ": " << why;
  throw Error(ErrorKind::not_supported, message.str(), std::string(field));
}

// The same refusal for a field known by name (a check that returns the first offending field):
// its value comes from the config.
[[noreturn]] void unsupported_field(const KernelConfig& config, std::string_view field,
                                    std::string_view why);

// Refuses the fields no forward kernel implements, in this order: a paged K/V table (unless the
// kernel `reads_pages`), RoPE (which belongs to fwd_appendkv), fp8 scales (`fp8_why` says why
// the pipeline has none; empty where the pipeline checks its fp8 support itself) and the
// backward-only flags.
void check_forward_fields(const KernelConfig& config, std::string_view fp8_why,
                          bool reads_pages = false);

// Whether the config reads K/V through a page table: the paged families (fwd_pagedkv,
// batch_prefill), and split-KV partials over a paged cache (paged decode's long contexts).
bool reads_paged_kv(const KernelConfig& config);
// What every paged forward kernel needs: a page table, and bounds-checked sequences (paged
// sequences carry their own key counts).
void check_paged_fields(const KernelConfig& config);
// Refuses the sm90_ws forward's launch forms `accumulate` (its epilogue merges into O) and
// `warp_decode` (split-KV decode on warp MMAs) for every other template.
void check_no_sm90_forward_forms(const KernelConfig& config);

}  // namespace tilefmha::codegen
