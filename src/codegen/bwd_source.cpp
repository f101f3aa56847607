#include <sstream>
#include <string>

#include "codegen/bwd.hpp"
#include "codegen/hook_names.hpp"
#include "codegen/unsupported.hpp"
#include "fmha/bwd_shape.h"
#include "fmha/bwd_sm80_shape.h"
#include "tilefmha/error.hpp"

namespace tilefmha::codegen {
namespace {

constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;

void check_sixteen_bit(const KernelConfig& c, std::string_view why) {
  if (c.dtype != DType::fp16 && c.dtype != DType::bf16) unsupported("dtype", c.dtype, why);
  if (c.out_dtype != c.dtype)
    unsupported("out_dtype", c.out_dtype, "gradients have the inputs' dtype");
}

void check_head_dims(const KernelConfig& c, int max_hdim, std::string_view why) {
  if (c.hdim_q < 8 || c.hdim_q > max_hdim || c.hdim_q % 8 != 0)
    unsupported("hdim_q", c.hdim_q, why);
  if (c.hdim_v < 8 || c.hdim_v > max_hdim || c.hdim_v % 8 != 0)
    unsupported("hdim_v", c.hdim_v, why);
}

}  // namespace

void check_backward_fields(const KernelConfig& c) {
  if (c.page_table != PageTableKind::none)
    unsupported("page_table", c.page_table, "backward reads contiguous K/V");
  if (c.page_size != 0) unsupported("page_size", c.page_size, "backward reads no pages");
  if (c.kv_layout != KvLayout::nhd) unsupported("kv_layout", c.kv_layout, "backward has no pages");
  if (c.rope != RopeKind::none) unsupported("rope", c.rope, "RoPE belongs to fwd_appendkv");
  if (c.fp8_scale != Fp8ScaleKind::none)
    unsupported("fp8_scale", c.fp8_scale, "backward of fp8 inputs is not supported");
  if (c.lse) unsupported("lse", c.lse, "backward reads the forward's LSE, it writes none");
  if (c.sink_logit)
    unsupported("sink_logit", c.sink_logit,
                "backward kernels carry no sink trait (the LSE already holds the sink)");
  if (c.pack_gqa)
    unsupported("pack_gqa", c.pack_gqa, "the backward loops over the GQA group's heads in its CTA");
  check_no_sm90_forward_forms(c);
}

void check_supported_bwd_rows(const KernelConfig& c) {
  const bool dot = c.family == Family::bwd_dot_do_o;
  if (!dot && c.family != Family::bwd_convert_dq)
    unsupported("family", c.family, "the backward row kernels are bwd_dot_do_o and bwd_convert_dq");
  const Pipeline pipeline = dot ? Pipeline::bwd_dot_do_o : Pipeline::bwd_convert_dq;
  if (c.pipeline != pipeline)
    unsupported("pipeline", c.pipeline,
                std::string("family ") + std::string(to_string(c.family)) + " runs on pipeline " +
                    std::string(to_string(pipeline)));
  check_sixteen_bit(c, "the GPU backward runs on fp16 or bf16 (sm80_mma)");
  check_head_dims(c, 256, "must be a multiple of 8 in 8..256 (16-byte row chunks)");
  if (c.warps < 1 || c.warps > 8) unsupported("warps", c.warps, "must be 1..8");
  if (c.block_m < c.warps || c.block_m > 1024)
    unsupported("block_m", c.block_m, "rows per CTA must be warps..1024");
  if (c.mask != MaskKind::none) unsupported("mask", c.mask, "row kernels see no scores");
  if (c.bias != BiasKind::none) unsupported("bias", c.bias, "row kernels see no scores");
  if (c.dropout) unsupported("dropout", c.dropout, "row kernels see no scores");
  if (c.softcap) unsupported("softcap", c.softcap, "row kernels see no scores");
  if (c.dbias) unsupported("dbias", c.dbias, "dBias belongs to bwd_dq_dk_dv");
  if (dot && c.deterministic)
    unsupported("deterministic", c.deterministic, "D is a plain row sum either way");
  if (c.persistent)
    unsupported("persistent", c.persistent, "row kernels run one CTA per row block");
  check_backward_fields(c);
}

void check_supported_bwd_sm80(const KernelConfig& c) {
  if (c.family != Family::bwd_dq_dk_dv)
    unsupported("family", c.family, "the sm80_mma backward kernel is bwd_dq_dk_dv");
  if (c.pipeline != Pipeline::sm80_mma)
    unsupported("pipeline", c.pipeline, "codegen implements bwd_dq_dk_dv on sm80_mma only");
  check_sixteen_bit(c, "sm80_mma computes on fp16 or bf16");
  // dK and dV of a warp's 16 keys live in registers beside the S^T and dP^T tiles; past 128
  // columns they are split over two warps per 16 keys (fmha/bwd_sm80_shape.h).
  check_head_dims(c, 256, "must be a multiple of 8 in 8..256 (dK/dV split in 128-column parts)");
  if (c.warps < 1 || c.warps > 8) unsupported("warps", c.warps, "must be 1..8");
  const int parts = fmha::bwd_sm80_column_parts(c.hdim_q, c.hdim_v);
  if (c.block_n % 16 != 0 || c.block_n / 16 * parts != c.warps)
    unsupported("block_n", c.block_n,
                "must be 16 * warps / " + std::to_string(parts) +
                    " (each warp owns 16 keys and one of " + std::to_string(parts) +
                    " dK/dV column parts)");
  if (c.block_m < 32 || c.block_m > 128 || c.block_m % 32 != 0)
    unsupported("block_m", c.block_m, "must be 32, 64, 96 or 128 (32-query dS^T panels)");
  // The kernel stages one query block at a time; deeper pipelines are not implemented.
  if (c.stages < 1 || c.stages > 2) unsupported("stages", c.stages, "must be 1 or 2");
  if (c.dbias && c.bias != BiasKind::elementwise)
    unsupported("dbias", c.dbias, "dBias is the gradient of an elementwise bias");
  if (c.persistent)
    unsupported("persistent", c.persistent, "the sm80_mma backward runs one CTA per key block");
  check_backward_fields(c);
}

int threads_per_block_bwd(const KernelConfig& c) {
  return c.warps * 32;
}

int64_t shared_bytes_bwd_rows(const KernelConfig&) {
  return 0;
}

int64_t shared_bytes_bwd_sm80(const KernelConfig& c) {
  return fmha::bwd_sm80_shared_bytes(c.hdim_q, c.hdim_v, c.block_m, c.block_n,
                                     static_cast<int>(dtype_size(c.dtype)));
}

std::string generate_bwd_rows_source(const KernelConfig& c) {
  check_supported_bwd_rows(c);
  const bool dot = c.family == Family::bwd_dot_do_o;
  std::ostringstream tu;
  tu << "// Generated by tilefmha codegen from " << c.name() << "\n"
     << "#include \"fmha/" << (dot ? "bwd_dot_do_o.h" : "bwd_convert_dq.h") << "\"\n\n"
     << "namespace {\n"
     << "using Traits = tilefmha::fmha::" << (dot ? "DotDoOTraits" : "ConvertDqTraits") << "<"
     << element_type(c.dtype) << ", /*block_m=*/" << c.block_m << ", /*warps=*/" << c.warps
     << ">;\n"
     << "}  // namespace\n\n"
     << "extern \"C\" __global__ void __launch_bounds__(" << threads_per_block_bwd(c) << ") "
     << c.symbol() << "(const tilefmha::fmha::BwdParams params) {\n"
     << "  tilefmha::fmha::" << (dot ? "bwd_dot_do_o" : "bwd_convert_dq") << "<Traits>(params);\n"
     << "}\n";
  return tu.str();
}

std::string generate_bwd_sm80_source(const KernelConfig& c) {
  check_supported_bwd_sm80(c);
  std::ostringstream tu;
  tu << "// Generated by tilefmha codegen from " << c.name() << "\n"
     << "#include \"fmha/bwd_sm80.h\"\n\n"
     << "namespace {\n"
     << "using Traits = tilefmha::fmha::BwdTraits<\n"
     << "    " << element_type(c.dtype) << ",\n"
     << "    /*hdim_q=*/" << c.hdim_q << ", /*hdim_v=*/" << c.hdim_v << ",\n"
     << "    /*block_m=*/" << c.block_m << ", /*block_n=*/" << c.block_n << ", /*warps=*/"
     << c.warps << ",\n"
     << "    /*group_mode=*/" << boolean(c.mode == Mode::group) << ",\n"
     << "    /*pad_hdim_q=*/" << boolean(c.pad_hdim_q) << ", /*pad_hdim_v=*/"
     << boolean(c.pad_hdim_v) << ",\n"
     << "    " << mask_hook(c.mask) << ",\n"
     << "    /*softcap=*/" << boolean(c.softcap) << ", /*deterministic=*/"
     << boolean(c.deterministic) << ",\n"
     << "    "
     << (c.bias == BiasKind::elementwise ? "tilefmha::fmha::BwdElementwiseBias" : bias_hook(c.bias))
     << ",\n"
     << "    " << (c.dropout ? "tilefmha::fmha::BwdPhiloxDropout" : "tilefmha::fmha::BwdNoDropout")
     << ",\n"
     << "    " << (c.dbias ? "tilefmha::fmha::BwdDBias" : "tilefmha::fmha::NoDBias") << ">;\n"
     << "}  // namespace\n\n"
     << "extern \"C\" __global__ void __launch_bounds__(" << threads_per_block_bwd(c) << ") "
     << c.symbol() << "(const tilefmha::fmha::BwdParams params) {\n"
     << "  tilefmha::fmha::bwd_sm80<Traits>(params);\n"
     << "}\n";
  return tu.str();
}

int64_t bwd_rows(const Problem& problem) {
  if (problem.mode != Mode::group) return problem.batch * problem.query_rows() * problem.nhead_q;
  // A plan is reused for every problem of its key, which holds batch and the longest sequence
  // but not the total token count: the grid (like the plan's D and dQ workspace) covers the
  // most tokens such a problem can have, so no later call leaves rows without D or dQ.
  return problem.batch * problem.seqlen_q * problem.nhead_q;
}

jit::LaunchShape launch_shape_bwd_rows(const KernelConfig& c, const Problem& problem) {
  check_supported_bwd_rows(c);
  const int64_t blocks = (bwd_rows(problem) + c.block_m - 1) / c.block_m;
  if (blocks > kMaxGridX)
    throw Error(ErrorKind::not_supported,
                "rows = " + std::to_string(bwd_rows(problem)) + " (tokens x nhead_q): " +
                    std::to_string(blocks) + " CTAs exceed the grid's 2^31 - 1",
                "seqlen_q");
  jit::LaunchShape shape;
  // A grid needs one block even with no rows; its threads find none and exit.
  shape.grid[0] = static_cast<unsigned>(blocks > 0 ? blocks : 1);
  shape.block[0] = static_cast<unsigned>(threads_per_block_bwd(c));
  return shape;
}

int64_t bwd_key_blocks(const KernelConfig& c, const Problem& problem) {
  return (problem.seqlen_k + c.block_n - 1) / c.block_n;
}

jit::LaunchShape launch_shape_bwd_sm80(const KernelConfig& c, const Problem& problem) {
  check_supported_bwd_sm80(c);
  if (problem.nhead_k > kMaxGridYZ)
    throw Error(ErrorKind::not_supported,
                "nhead_k = " + std::to_string(problem.nhead_k) + " exceeds the grid's 65535",
                "nhead_k");
  if (problem.batch > kMaxGridYZ)
    throw Error(ErrorKind::not_supported,
                "batch = " + std::to_string(problem.batch) + " exceeds the grid's 65535", "batch");
  const int64_t blocks = bwd_key_blocks(c, problem);
  jit::LaunchShape shape;
  shape.grid[0] = static_cast<unsigned>(blocks > 0 ? blocks : 1);
  shape.grid[1] = static_cast<unsigned>(problem.nhead_k);
  shape.grid[2] = static_cast<unsigned>(problem.batch > 0 ? problem.batch : 1);
  shape.block[0] = static_cast<unsigned>(threads_per_block_bwd(c));
  shape.dynamic_shared_bytes = static_cast<unsigned>(shared_bytes_bwd_sm80(c));
  return shape;
}

}  // namespace tilefmha::codegen
