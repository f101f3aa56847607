#include "codegen/unsupported.hpp"

namespace tilefmha::codegen {

void unsupported_field(const KernelConfig& c, std::string_view field, std::string_view why) {
  throw Error(
      ErrorKind::not_supported,
      std::string(field) + " = " + field_to_string(get_field(c, field)) + ": " + std::string(why),
      std::string(field));
}

void check_forward_fields(const KernelConfig& c, std::string_view fp8_why, bool reads_pages) {
  if (!reads_pages && c.page_table != PageTableKind::none)
    unsupported("page_table", c.page_table, "the fwd kernel reads contiguous K/V");
  if (c.rope != RopeKind::none) unsupported("rope", c.rope, "RoPE belongs to fwd_appendkv");
  if (!fp8_why.empty() && c.fp8_scale != Fp8ScaleKind::none)
    unsupported("fp8_scale", c.fp8_scale, fp8_why);
  if (c.deterministic) unsupported("deterministic", c.deterministic, "backward only");
  if (c.dbias) unsupported("dbias", c.dbias, "backward only");
}

bool reads_paged_kv(const KernelConfig& c) {
  return c.family == Family::fwd_pagedkv || c.family == Family::batch_prefill ||
         (c.family == Family::fwd_splitkv && c.page_table != PageTableKind::none);
}

void check_paged_fields(const KernelConfig& c) {
  if (c.page_table == PageTableKind::none)
    unsupported("page_table", c.page_table, "a paged family reads K/V through a page table");
  if (!(c.pad_seqlen_q && c.pad_seqlen_k))
    unsupported("pad_seqlen_k", c.pad_seqlen_k,
                "paged K/V needs pad_seqlen_q and pad_seqlen_k (per-sequence key counts)");
}

void check_no_sm90_forward_forms(const KernelConfig& c) {
  if (c.accumulate)
    unsupported("accumulate", c.accumulate, "only the sm90_ws forward merges into O");
  if (c.warp_decode)
    unsupported("warp_decode", c.warp_decode, "only sm90_ws split-KV decode runs on warp MMAs");
}

}  // namespace tilefmha::codegen
