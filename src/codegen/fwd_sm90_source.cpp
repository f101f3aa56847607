#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "codegen/fwd_sm90.hpp"
#include "codegen/hook_names.hpp"
#include "codegen/unsupported.hpp"
#include "fmha/fwd_sm90_shape.h"
#include "fmha/splitkv.h"
#include "tilefmha/error.hpp"

namespace tilefmha::codegen {
namespace {

// Hopper's opt-in shared memory per block (data/arch/sm90.json limits).
constexpr int kMaxSharedBytes = 232448;
// Registers a consumer thread needs beside its accumulators (addresses, softmax state, loop
// counters), measured on the compiled kernels with room to spare.
constexpr int kConsumerRegisterOverhead = 24;

bool whole_panels(int hdim, DType dtype) {
  const int panel = fmha::sm90_panel_elements(static_cast<int>(dtype_size(dtype)));
  return hdim % panel == 0 && hdim >= panel && hdim <= 256;
}

std::string_view descale_name(Fp8ScaleKind kind) {
  switch (kind) {
    case Fp8ScaleKind::per_tensor: return "tilefmha::fmha::Sm90Descale::per_tensor";
    case Fp8ScaleKind::per_block: return "tilefmha::fmha::Sm90Descale::per_block";
    case Fp8ScaleKind::per_page: return "tilefmha::fmha::Sm90Descale::per_page";
    default: break;
  }
  return "tilefmha::fmha::Sm90Descale::none";
}

// What fp8 inputs add: bf16 O, 128-key blocks (one transposed V panel) and a descale kind the
// kernel reads (per page only over a paged cache).
void check_fp8_fields(const KernelConfig& c) {
  if (c.out_dtype != DType::bf16)
    unsupported("out_dtype", c.out_dtype, "sm90_ws writes the O of fp8 inputs as bf16");
  if (c.block_n != fmha::kSm90Fp8BlockN)
    unsupported("block_n", c.block_n,
                "sm90_ws fp8 key blocks are " + std::to_string(fmha::kSm90Fp8BlockN) +
                    " keys (one 128-byte row of the transposed V tile per column)");
  if (c.fp8_scale == Fp8ScaleKind::none)
    unsupported("fp8_scale", c.fp8_scale, "fp8 inputs need a descale kind");
  if (c.fp8_scale == Fp8ScaleKind::per_page && !reads_paged_kv(c))
    unsupported("fp8_scale", c.fp8_scale, "per-page descales need a paged cache");
}

std::string_view schedule_name(fmha::Sm90Schedule schedule) {
  switch (schedule) {
    case fmha::Sm90Schedule::serial: return "tilefmha::fmha::Sm90Schedule::serial";
    case fmha::Sm90Schedule::overlap: return "tilefmha::fmha::Sm90Schedule::overlap";
    case fmha::Sm90Schedule::pingpong: break;
  }
  return "tilefmha::fmha::Sm90Schedule::pingpong";
}

// The first field whose feature differs per head (or needs a layout a packed tile lacks), so a
// packed GQA tile, whose rows span the g heads of a group, cannot hold it.
std::optional<std::string_view> per_head_feature(const KernelConfig& c) {
  if (c.mode != Mode::batch) return "mode";
  if (c.dropout) return "dropout";
  if (c.sink_logit) return "sink_logit";
  if (c.bias != BiasKind::none) return "bias";
  if (c.softcap) return "softcap";
  return std::nullopt;
}

// The warp-MMA decode consumer (fmha/fwd_sm90_warp_decode.h) runs plain split-KV decode tiles:
// the scale folded into the exponent, no mask but the sequence end, one consumer warpgroup and
// 128-key blocks whose four 32-key quarters go to its four warps. The first field that rules a
// config out, if any.
std::optional<std::string_view> warp_decode_refusal(const KernelConfig& c) {
  if (c.family != Family::fwd_splitkv) return "family";
  if (c.dtype != DType::fp16 && c.dtype != DType::bf16) return "dtype";
  if (c.mask != MaskKind::none) return "mask";
  if (c.bias != BiasKind::none) return "bias";
  if (c.softcap) return "softcap";
  if (c.dropout) return "dropout";
  if (c.block_m != fmha::kSm90WarpgroupRows) return "block_m";
  if (c.block_n != 128) return "block_n";
  return std::nullopt;
}

void check_warp_decode_fields(const KernelConfig& c) {
  if (const std::optional<std::string_view> field = warp_decode_refusal(c))
    unsupported_field(c, *field,
                      "warp MMAs run split-KV decode (family fwd_splitkv) on fp16 or bf16 with no "
                      "mask, bias, soft cap or dropout, in 64 x 128 tiles");
}

// What the split-KV mode adds: partials without dropout, sink logit or an LSE output of their
// own (the combine adds the sink logit once and writes the final LSE), one CTA per tile, and key
// blocks that never straddle two splits.
void check_splitkv_fields(const KernelConfig& c) {
  if (c.dropout)
    unsupported("dropout", c.dropout, "split-KV partials carry no dropout (family fwd_splitkv)");
  if (c.sink_logit)
    unsupported("sink_logit", c.sink_logit,
                "split-KV partials exclude the sink logit; the combine adds it once");
  if (c.lse)
    unsupported("lse", c.lse,
                "a split always writes its LSE into split.lse_acc; the combine writes the final "
                "LSE");
  if (c.persistent)
    unsupported("persistent", c.persistent,
                "the sm90_ws split-KV mode runs one CTA per tile (its grid already counts the "
                "splits)");
  if (fmha::kSplitKvGranule % c.block_n != 0)
    unsupported("block_n", c.block_n,
                "split-KV chunks are multiples of " + std::to_string(fmha::kSplitKvGranule) +
                    " keys, so a key block must divide " + std::to_string(fmha::kSplitKvGranule) +
                    " (none may straddle two splits)");
}

}  // namespace

int64_t sm90_paged_box_rows(const KernelConfig& c, const Problem& problem) {
  return problem.is_paged() ? std::min<int64_t>(problem.paged.page_size, c.block_n) : c.block_n;
}

Sm90KvGrouping sm90_kv_grouping(const KernelConfig& c, const Problem& problem) {
  const int64_t panel = fmha::sm90_panel_elements(static_cast<int>(dtype_size(c.dtype)));
  // A padded head dim's last panel ends inside the row, where a box over panels cannot clip it.
  const bool whole_panels = problem.hdim_q == c.hdim_q && problem.hdim_v == c.hdim_v &&
                            c.hdim_q % panel == 0 && c.hdim_v % panel == 0;
  const bool eligible = problem.is_paged() && !is_fp8(c.dtype) && whole_panels &&
                        std::max(c.hdim_q, c.hdim_v) / panel >= 2 &&
                        problem.paged.page_size % 8 == 0 &&
                        problem.paged.page_size <= kSm90GroupedMaxPageSize && problem.k.rank == 4 &&
                        problem.v.rank == 4;
  if (!eligible) return {};
  // Pools are [page, slot, head, dim] views.
  auto heads_side_by_side = [](const TensorView& pool) {
    return pool.shape[2] == 1 || pool.stride[2] == pool.shape[3];
  };
  auto pages_of_heads = [](const TensorView& pool) {
    return pool.stride[0] == pool.shape[2] * pool.stride[2];
  };
  if (heads_side_by_side(problem.k) && heads_side_by_side(problem.v)) return {true, 0};
  if (pages_of_heads(problem.k) && pages_of_heads(problem.v)) return {true, problem.k.shape[2]};
  return {};
}

void check_supported_sm90(const KernelConfig& c) {
  const bool paged = reads_paged_kv(c);
  if (c.family != Family::fwd && c.family != Family::fwd_splitkv && !paged)
    unsupported("family", c.family,
                "sm90_ws codegen implements fwd, fwd_splitkv, fwd_pagedkv and batch_prefill");
  if (paged) check_paged_fields(c);
  // The any-page-size kernel serves every page size it can (the template checks the problem's);
  // the size-specialized tables exist for sm80_mma's row gathers.
  if (paged && c.page_size != 0)
    unsupported("page_size", c.page_size,
                "sm90_ws reads tables of any page size (page_size 0) a page at a time; the "
                "size-specialized kernels are sm80_mma's");
  if (c.pipeline != Pipeline::sm90_ws)
    unsupported("pipeline", c.pipeline, "this codegen implements sm90_ws");
  if (c.arch != Arch::sm90) unsupported("arch", c.arch, "sm90_ws needs sm_90a (wgmma, TMA)");
  const bool fp8 = is_fp8(c.dtype);
  if (c.dtype != DType::fp16 && c.dtype != DType::bf16 && !fp8)
    unsupported("dtype", c.dtype, "sm90_ws computes on fp16, bf16 or fp8");
  if (fp8) {
    check_fp8_fields(c);
  } else if (c.out_dtype != c.dtype) {
    unsupported("out_dtype", c.out_dtype, "sm90_ws writes O in the input dtype");
  }
  const std::string_view widths =
      fp8 ? "128 or 256 for fp8 (whole 128-byte panels of 8-bit elements)"
          : "64, 128, 192 or 256 (whole 128-byte panels)";
  if (!whole_panels(c.hdim_q, c.dtype))
    unsupported("hdim_q", c.hdim_q, "sm90_ws needs " + std::string(widths));
  if (!whole_panels(c.hdim_v, c.dtype))
    unsupported("hdim_v", c.hdim_v, "sm90_ws needs " + std::string(widths));
  if (c.block_m % fmha::kSm90WarpgroupRows != 0 || c.block_m < fmha::kSm90WarpgroupRows ||
      fmha::sm90_consumer_groups(c.block_m) > fmha::kSm90MaxConsumerGroups)
    unsupported("block_m", c.block_m, "sm90_ws needs 64, 128 or 192 (64 rows per warpgroup)");
  if (c.warps * 32 != fmha::sm90_threads(c.block_m))
    unsupported("warps", c.warps,
                "sm90_ws needs 4 * (block_m / 64 + 1): a producer and the consumer warpgroups");
  if (c.block_n < 16 || c.block_n > 256 || c.block_n % 16 != 0)
    unsupported("block_n", c.block_n, "sm90_ws needs a multiple of 16 in 16..256");
  if (c.stages < 1 || c.stages > 4) unsupported("stages", c.stages, "sm90_ws needs 1..4");
  const fmha::Sm90SmemLayout layout = sm90_layout(c);
  if (layout.bytes > kMaxSharedBytes)
    unsupported("stages", c.stages,
                "the tile needs " + std::to_string(layout.bytes) +
                    " bytes of shared memory, more than Hopper's " +
                    std::to_string(kMaxSharedBytes));
  const int groups = fmha::sm90_consumer_groups(c.block_m);
  // A paged 16-bit kernel's gather entry leaves its consumers fewer registers than the TMA one.
  const int budget = groups == 1 && fmha::sm90_ctas_per_sm(c.block_m, layout.bytes) == 1 ? 255
                     : sm90_has_gather_entry(c)
                         ? fmha::sm90_gather_consumer_registers(groups)
                         : fmha::sm90_consumer_registers(groups, fp8, c.hdim_v);
  // S (fp32), P (packed 16-bit, or 8-bit for fp8) and O (fp32) accumulators per consumer thread.
  const int accumulators = c.block_n / 2 + c.block_n / (fp8 ? 8 : 4) + c.hdim_v / 2;
  if (accumulators + kConsumerRegisterOverhead > budget)
    unsupported("block_n", c.block_n,
                "S, P and O accumulators need " + std::to_string(accumulators) +
                    " registers per thread, over the " + std::to_string(budget) +
                    " a consumer has (would spill)");
  check_forward_fields(c, "", paged);
  if (c.pack_gqa) {
    if (const std::optional<std::string_view> field = per_head_feature(c))
      unsupported_field(c, *field,
                        "a packed GQA tile holds several heads: batch mode without per-head "
                        "dropout, sink logit, bias, ALiBi or soft cap");
  }
  if (c.family == Family::fwd_splitkv) check_splitkv_fields(c);
  if (c.warp_decode) check_warp_decode_fields(c);
  if (c.accumulate && (c.family != Family::fwd || fp8 || !c.lse || c.sink_logit))
    unsupported("accumulate", c.accumulate,
                "the epilogue merges into O and LSE for family fwd with 16-bit inputs, an LSE "
                "output and no sink logit");
}

Sm90Variant default_sm90_variant(const KernelConfig& c) {
  Sm90Variant variant;
  // FP8 measured faster without turn taking (H100, 16k tokens: hdim 128 729 against 710
  // TFLOP/s, hdim 256 651 against 537): its transposer warps already share the SM's issue slots.
  // At hdim 256 the overlap schedule's two blocks of scores beside O exceed a consumer's
  // registers (ptxas serializes the wgmmas) and still beat the serial schedule, which fits
  // (H200, 16k tokens, 2 stages: 997 against 947 TFLOP/s).
  const bool turns = fmha::sm90_consumer_groups(c.block_m) > 1 && !is_fp8(c.dtype);
  variant.schedule = turns ? fmha::Sm90Schedule::pingpong : fmha::Sm90Schedule::overlap;
  variant.persistent = c.persistent;
  return variant;
}

fmha::Sm90SmemLayout sm90_layout(const KernelConfig& c) {
  return fmha::sm90_smem_layout(c.hdim_q, c.hdim_v, c.block_m, c.block_n, c.stages,
                                static_cast<int>(dtype_size(c.dtype)));
}

int threads_per_block_sm90(const KernelConfig& c) {
  return fmha::sm90_threads(c.block_m);
}

bool sm90_warp_decode_supported(const KernelConfig& c) {
  return c.pipeline == Pipeline::sm90_ws && !warp_decode_refusal(c);
}

int sm90_ctas_per_sm(const KernelConfig& c) {
  return fmha::sm90_ctas_per_sm(c.block_m, sm90_layout(c).bytes);
}

std::string generate_sm90_source(const KernelConfig& c) {
  return generate_sm90_source(c, default_sm90_variant(c));
}

std::string generate_sm90_source(const KernelConfig& c, const Sm90Variant& variant) {
  check_supported_sm90(c);
  const bool split = c.family == Family::fwd_splitkv;
  const bool fp8 = is_fp8(c.dtype);
  if (split && variant.persistent)
    unsupported("persistent", variant.persistent,
                "the sm90_ws split-KV mode runs one CTA per tile (Sm90Variant.persistent)");
  std::ostringstream tu;
  tu << "// Generated by tilefmha codegen from " << c.name() << "\n"
     << (c.warp_decode ? "#define TILEFMHA_WARP_DECODE 1\n" : "")
     << "#include \"fmha/fwd_sm90.h\"\n\n"
     << "namespace {\n"
     << "using Traits = tilefmha::fmha::Sm90FwdTraits<\n"
     << "    " << element_type(c.dtype) << ",\n"
     << "    /*hdim_q=*/" << c.hdim_q << ", /*hdim_v=*/" << c.hdim_v << ",\n"
     << "    /*block_m=*/" << c.block_m << ", /*block_n=*/" << c.block_n << ", /*stages=*/"
     << c.stages << ",\n"
     << "    /*group_mode=*/" << boolean(c.mode == Mode::group) << ",\n"
     << feature_hook_arguments(c) << ",\n"
     << "    " << schedule_name(variant.schedule) << ", /*persistent=*/"
     << boolean(variant.persistent) << ", /*pack_gqa=*/"
     << boolean(c.pack_gqa)
     // Only split, paged and fp8 kernels spell their flags, so every 16-bit fwd translation
     // unit stays as it was.
     << (split || reads_paged_kv(c) || fp8 ? std::string(", /*split_kv=*/") + boolean(split) : "")
     << (reads_paged_kv(c) || fp8 ? std::string(", /*paged=*/") + boolean(reads_paged_kv(c)) : "")
     << (fp8 ? ", tilefmha::tile::bfloat16_t, " + std::string(descale_name(c.fp8_scale)) : "")
     << (c.accumulate
             ? ", /*split_kv=*/false, /*paged=*/false, " + std::string(element_type(c.dtype)) +
                   ", " + std::string(descale_name(c.fp8_scale)) + ", /*accumulate=*/true"
             : "")
     << ">;\n"
     << "}  // namespace\n\n"
     << "extern \"C\" __global__ void __launch_bounds__(" << threads_per_block_sm90(c) << ", "
     << sm90_ctas_per_sm(c) << ") " << c.symbol()
     << "(const __grid_constant__ tilefmha::fmha::Sm90FwdParams params) {\n"
     << "  tilefmha::fmha::fwd_sm90<Traits>(params);\n"
     << "}\n";
  if (sm90_has_gather_entry(c))
    tu << "\nextern \"C\" __global__ void __launch_bounds__(" << threads_per_block_sm90(c) << ", "
       << sm90_ctas_per_sm(c) << ") " << sm90_gather_entry(c)
       << "(const __grid_constant__ tilefmha::fmha::Sm90FwdParams params) {\n"
       << "  tilefmha::fmha::fwd_sm90_gather<Traits>(params);\n"
       << "}\n";
  if (split)
    tu << "\nextern \"C\" __global__ void __launch_bounds__(" << threads_per_block_sm90(c) << ", "
       << sm90_ctas_per_sm(c) << ") " << sm90_cluster_merge_entry(c)
       << "(const __grid_constant__ tilefmha::fmha::Sm90FwdParams params) {\n"
       << "  tilefmha::fmha::fwd_sm90_cluster_merge<Traits>(params);\n"
       << "}\n";
  return tu.str();
}

bool sm90_has_gather_entry(const KernelConfig& c) {
  return reads_paged_kv(c) && !is_fp8(c.dtype);
}

std::string sm90_gather_entry(const KernelConfig& c) {
  return c.symbol() + "_gather";
}

std::string sm90_cluster_merge_entry(const KernelConfig& c) {
  return c.symbol() + "_cluster_merge";
}

bool sm90_persistent_grid_pays(const KernelConfig& c, const Problem& problem) {
  // Longest masked rows measured to gain (H100, bf16, hdim 64/128/256): +10-21% up to 8k,
  // a tie or a loss at 16k against the hardware's dynamic scheduling of one CTA per tile.
  constexpr int64_t kMaskedMaxRows = 8192;
  if (problem.mode == Mode::group || !problem.seqlen_k_per_batch.empty()) return false;
  const bool separate_o = sm90_layout(c).separate_o();
  // Masked rows: but where O shares the Q buffer (hdim 256), 512-row tiles are too short for the
  // persistent CTA to gain, and one CTA per tile measured 11% faster.
  if (problem.mask.kind != MaskKind::none)
    return problem.seqlen_q <= kMaskedMaxRows && (separate_o || problem.seqlen_q > 512);
  // Equal tiles: the gain is the next Q loading under this tile's epilogue, which needs O's
  // own buffer (without it, hdim 256 lost 1-4%).
  return separate_o;
}

bool sm90_pack_gqa_pays(const KernelConfig& c, const Problem& problem) {
  if (per_head_feature(c) || problem.nhead_k <= 0) return false;
  const int64_t group = problem.nhead_q / problem.nhead_k;
  // Rows a one-head tile would leave mostly empty. A group that does not divide 64 fills a
  // 64-row tile with whole groups and leaves the rest unused (a 28/4-head decode: 63 of 64 rows);
  // wider tiles split rows between warpgroups at 64, which must then start a group.
  const bool whole_groups = fmha::kSm90WarpgroupRows % group == 0;
  return group >= 2 && group <= fmha::kSm90WarpgroupRows &&
         (whole_groups || c.block_m == fmha::kSm90WarpgroupRows) && problem.seqlen_q < c.block_m;
}

int64_t sm90_problem_splits(const KernelConfig& c, const Problem& problem) {
  return c.family == Family::fwd_splitkv ? problem.split.num_splits : 1;
}

std::optional<int64_t> sm90_scheduler_tiles(const KernelConfig& c, const Problem& problem,
                                            int64_t num_splits) {
  const int64_t group = c.pack_gqa && problem.nhead_k > 0 ? problem.nhead_q / problem.nhead_k : 1;
  const int64_t rows = std::max<int64_t>(c.block_m / group, 1);
  int64_t blocks = problem.seqlen_q / rows + (problem.seqlen_q % rows != 0);
  // bind_sm90_grid pairs the query blocks of masked fwd kernels on a persistent grid, counting
  // them in whole pairs; count them so whatever the grid, as the larger of the two.
  if (c.mask != MaskKind::none && c.family != Family::fwd_splitkv) blocks += blocks % 2;
  int64_t tiles = blocks;
  for (const int64_t factor : {c.pack_gqa ? problem.nhead_k : problem.nhead_q, problem.batch,
                               std::max<int64_t>(num_splits, 1)})
    if (__builtin_mul_overflow(tiles, factor, &tiles)) return std::nullopt;
  return tiles;
}

jit::LaunchShape launch_shape_sm90(const KernelConfig& c, const Problem& problem,
                                   int64_t sm_count) {
  return launch_shape_sm90(c, problem, default_sm90_variant(c), sm_count,
                           sm90_problem_splits(c, problem));
}

jit::LaunchShape launch_shape_sm90(const KernelConfig& c, const Problem& problem,
                                   const Sm90Variant& variant, int64_t max_ctas) {
  return launch_shape_sm90(c, problem, variant, max_ctas, sm90_problem_splits(c, problem));
}

jit::LaunchShape launch_shape_sm90(const KernelConfig& c, const Problem& problem,
                                   const Sm90Variant& variant, int64_t max_ctas,
                                   int64_t num_splits) {
  check_supported_sm90(c);
  if (c.family == Family::fwd_splitkv) {
    if (num_splits < 1)
      throw Error(ErrorKind::invalid_argument,
                  "num_splits = " + std::to_string(num_splits) + ": a split-KV grid needs >= 1",
                  "num_splits");
    if (variant.persistent)
      unsupported("persistent", variant.persistent,
                  "the sm90_ws split-KV mode runs one CTA per tile (Sm90Variant.persistent)");
  } else if (num_splits != 1) {
    throw Error(ErrorKind::invalid_argument,
                "num_splits = " + std::to_string(num_splits) + ": family " +
                    std::string(to_string(c.family)) +
                    " computes whole rows; split-KV needs a fwd_splitkv kernel",
                "num_splits");
  }
  const std::optional<int64_t> scheduled = sm90_scheduler_tiles(c, problem, num_splits);
  if (!scheduled || *scheduled > kSm90MaxTiles)
    throw Error(ErrorKind::not_supported,
                "seqlen_q = " + std::to_string(problem.seqlen_q) + ", nhead_q = " +
                    std::to_string(problem.nhead_q) + ", batch = " + std::to_string(problem.batch) +
                    (num_splits > 1 ? ", num_splits = " + std::to_string(num_splits) : "") + ": " +
                    (scheduled ? std::to_string(*scheduled) : "more than 2^63") +
                    " tiles exceed the sm90 scheduler's 2^30");
  // Packed GQA: tiles of block_m / g query positions over the KV heads; split-KV tiles also run
  // over the splits (fwd_sm90_scheduler.h numbers them). Within kSm90MaxTiles, so no overflow.
  const int64_t group = c.pack_gqa && problem.nhead_k > 0 ? problem.nhead_q / problem.nhead_k : 1;
  const int64_t rows = c.block_m / group;
  const int64_t query_blocks = (problem.seqlen_q + rows - 1) / rows;
  const int64_t tiles =
      query_blocks * (c.pack_gqa ? problem.nhead_k : problem.nhead_q) * problem.batch * num_splits;
  // A persistent grid runs as many CTAs as the SMs hold at once.
  const int64_t resident = max_ctas * sm90_ctas_per_sm(c);
  const int64_t ctas = variant.persistent && resident > 0 && resident < tiles ? resident : tiles;
  jit::LaunchShape shape;
  // A grid needs one block even when there is no tile; such a CTA exits at once.
  shape.grid[0] = static_cast<unsigned>(ctas > 0 ? ctas : 1);
  shape.block[0] = static_cast<unsigned>(threads_per_block_sm90(c));
  shape.dynamic_shared_bytes = static_cast<unsigned>(sm90_layout(c).bytes);
  // The kernel waits for the stream's previous grid before touching global memory, so its launch
  // and set-up may overlap that grid's tail (a decode's calls are a few microseconds each).
  shape.programmatic_dependency = true;
  return shape;
}

}  // namespace tilefmha::codegen
