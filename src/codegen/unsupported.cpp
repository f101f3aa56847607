#include "codegen/unsupported.hpp"

namespace tilefmha::codegen {

void check_forward_fields(const KernelConfig& c, std::string_view fp8_why, bool reads_pages) {
  if (!reads_pages && c.page_table != PageTableKind::none)
    unsupported("page_table", c.page_table, "the fwd kernel reads contiguous K/V");
  if (c.rope != RopeKind::none) unsupported("rope", c.rope, "RoPE belongs to fwd_appendkv");
  if (c.fp8_scale != Fp8ScaleKind::none) unsupported("fp8_scale", c.fp8_scale, fp8_why);
  if (c.deterministic) unsupported("deterministic", c.deterministic, "backward only");
  if (c.dbias) unsupported("dbias", c.dbias, "backward only");
}

}  // namespace tilefmha::codegen
