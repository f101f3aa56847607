#include "runtime/fwd_sm90_params.hpp"

#include <cstdint>
#include <cstring>
#include <string>

#include "codegen/fwd_sm90.hpp"
#include "fmha/fwd_sm90_shape.h"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

constexpr int64_t kTmaStrideAlignment = 16;
constexpr int64_t kTmaMaxStrideBytes = int64_t{1} << 40;
constexpr int64_t kTmaMaxDim = int64_t{1} << 32;

[[noreturn]] void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

jit::TensorMapElement tma_element(DType dtype) {
  switch (dtype) {
    case DType::fp16: return jit::TensorMapElement::fp16;
    case DType::bf16: return jit::TensorMapElement::bf16;
    // TMA moves fp8 codes as bytes.
    case DType::fp8_e4m3:
    case DType::fp8_e5m2: return jit::TensorMapElement::uint8;
    default: break;
  }
  fail(ErrorKind::not_supported,
       "dtype = " + std::string(to_string(dtype)) + ": sm90_ws computes on fp16, bf16 or fp8");
}

// A 4D map [dim, seq, head, batch] over a logical [batch, seq, head, dim] view. A dim of extent
// 1 is never stepped over, so its stride may be anything the view carries (0, unaligned): it
// is replaced by a harmless aligned one.
jit::TiledTensorMapSpec view_map(const TensorView& view, const char* field, uint32_t box_rows) {
  if (view.empty()) fail(ErrorKind::invalid_problem, std::string(field) + " is not set");
  if (view.rank != 4)
    fail(ErrorKind::invalid_problem,
         std::string(field) + ".rank = " + std::to_string(view.rank) + ": expected 4");
  const int64_t element = dtype_size(view.dtype);
  if (view.stride[3] != 1)
    fail(ErrorKind::not_supported, std::string(field) +
                                       ".stride[3] = " + std::to_string(view.stride[3]) +
                                       ": TMA needs a contiguous head dim");
  if (reinterpret_cast<uintptr_t>(view.data) % kTmaStrideAlignment != 0)
    fail(ErrorKind::not_supported,
         std::string(field) + ".data is not 16-byte aligned, which TMA needs");

  jit::TiledTensorMapSpec spec;
  spec.element = tma_element(view.dtype);
  spec.global_address = reinterpret_cast<uintptr_t>(view.data);
  spec.swizzle = jit::TensorMapSwizzle::bytes128;
  spec.dims = {static_cast<uint64_t>(view.shape[3]), static_cast<uint64_t>(view.shape[1]),
               static_cast<uint64_t>(view.shape[2]), static_cast<uint64_t>(view.shape[0])};
  const auto panel = static_cast<uint32_t>(fmha::sm90_panel_elements(static_cast<int>(element)));
  spec.box = {panel, box_rows, 1, 1};
  const char* names[] = {"batch", "seq", "head"};
  const int order[] = {1, 2, 0};  // view dims in map order after the head dim
  const int64_t fallback = view.shape[3] * element;
  for (int d : order) {
    int64_t bytes = view.stride[d] * element;
    if (view.shape[d] == 1)
      bytes = (fallback + kTmaStrideAlignment - 1) / kTmaStrideAlignment * kTmaStrideAlignment;
    if (bytes <= 0 || bytes % kTmaStrideAlignment != 0 || bytes >= kTmaMaxStrideBytes)
      fail(ErrorKind::not_supported,
           std::string(field) + ".stride[" + std::to_string(d) + "] (" + names[d] +
               ") = " + std::to_string(view.stride[d]) +
               " elements: TMA needs a positive multiple of 16 bytes below 2^40");
    spec.strides_bytes.push_back(static_cast<uint64_t>(bytes));
  }
  for (int d = 0; d < 4; ++d) {
    if (view.shape[d] < 1 || view.shape[d] >= kTmaMaxDim)
      fail(ErrorKind::not_supported, std::string(field) + ".shape[" + std::to_string(d) + "] = " +
                                         std::to_string(view.shape[d]) + ": TMA needs 1..2^32-1");
  }
  return spec;
}

// A 5D map [dim, head in group, KV head, seq, batch] over a [batch, seq, head, dim] view whose
// heads are g-sized GQA groups: a box of g heads by rows / g positions loads or stores a packed
// tile's rows in (position, head) order.
jit::TiledTensorMapSpec packed_view_map(const TensorView& view, const char* field, int64_t group,
                                        uint32_t box_positions) {
  jit::TiledTensorMapSpec spec = view_map(view, field, box_positions);
  const int64_t element = dtype_size(view.dtype);
  const uint64_t head_bytes = spec.strides_bytes[1];  // map order: seq, head, batch
  const uint64_t kv_heads = static_cast<uint64_t>(view.shape[2] / group);
  spec.dims = {static_cast<uint64_t>(view.shape[3]), static_cast<uint64_t>(group), kv_heads,
               static_cast<uint64_t>(view.shape[1]), static_cast<uint64_t>(view.shape[0])};
  spec.strides_bytes = {head_bytes, head_bytes * static_cast<uint64_t>(group),
                        spec.strides_bytes[0], spec.strides_bytes[2]};
  const uint32_t panel = spec.box[0];
  spec.box = {panel, static_cast<uint32_t>(group), 1, box_positions, 1};
  if (view.stride[2] * element % kTmaStrideAlignment != 0)
    fail(ErrorKind::not_supported, std::string(field) +
                                       ".stride[2] (head) = " + std::to_string(view.stride[2]) +
                                       " elements: packed GQA needs 16-byte head strides");
  return spec;
}

// The K or V map of a paged kernel whose stages are laid out in 8-row groups
// (fmha/fwd_sm90_kv_layout.h), from the 4D [dim, slot, head, page] one: 5D [dim in panel, row in
// group, panel, group, page], so that a box {64, 8, panels, rows / 8, 1} lands its rows group
// after group, every panel of a group together. Heads join the panel dim where they lie side by
// side in a row (NHD, heads_in_pages 0), or the page dim where each page is a run of heads (HND).
jit::TiledTensorMapSpec grouped_pool_map(const jit::TiledTensorMapSpec& pool, uint64_t hdim,
                                         int64_t heads_in_pages) {
  jit::TiledTensorMapSpec spec = pool;
  const uint64_t panel = pool.box[0], panels = hdim / panel, slot_bytes = pool.strides_bytes[0];
  const uint64_t heads = pool.dims[2], pages = pool.dims[3];
  const uint64_t panel_bytes = static_cast<uint64_t>(fmha::kSm90RowBytes);
  if (heads_in_pages == 0) {
    spec.dims = {panel, 8, heads * panels, pool.dims[1] / 8, pages};
    spec.strides_bytes = {slot_bytes, panel_bytes, 8 * slot_bytes, pool.strides_bytes[2]};
  } else {
    spec.dims = {panel, 8, panels, pool.dims[1] / 8, pages * heads};
    spec.strides_bytes = {slot_bytes, panel_bytes, 8 * slot_bytes, pool.strides_bytes[1]};
  }
  spec.box = {static_cast<uint32_t>(panel), 8, static_cast<uint32_t>(panels), pool.box[1] / 8, 1};
  return spec;
}

}  // namespace

jit::TiledTensorMapSpec sm90_view_map(const TensorView& view, const char* field,
                                      uint32_t box_rows) {
  return view_map(view, field, box_rows);
}

Sm90TensorMapSpecs sm90_tensor_map_specs(const Problem& p, const KernelConfig& c) {
  if (p.dtype != c.dtype)
    fail(ErrorKind::invalid_argument, "dtype = " + std::string(to_string(p.dtype)) +
                                          " but the kernel is " + std::string(to_string(c.dtype)));
  // A padded kernel serves narrower head dims: TMA fills the columns past them with zeros on
  // load and clips them on store.
  if (p.hdim_q != c.hdim_q && !(c.pad_hdim_q && p.hdim_q < c.hdim_q))
    fail(ErrorKind::invalid_argument, "hdim_q = " + std::to_string(p.hdim_q) +
                                          " but the kernel is built for " +
                                          std::to_string(c.hdim_q));
  if (p.hdim_v != c.hdim_v && !(c.pad_hdim_v && p.hdim_v < c.hdim_v))
    fail(ErrorKind::invalid_argument, "hdim_v = " + std::to_string(p.hdim_v) +
                                          " but the kernel is built for " +
                                          std::to_string(c.hdim_v));
  Sm90TensorMapSpecs specs;
  // Split partials leave the kernel through plain fp32 stores, never through an O map.
  const bool store_o = c.family != Family::fwd_splitkv;
  if (c.pack_gqa) {
    const int64_t g = p.nhead_q / p.nhead_k;
    if (g < 2 || g > fmha::kSm90WarpgroupRows)
      fail(ErrorKind::not_supported,
           "nhead_q / nhead_k = " + std::to_string(g) + ": packed GQA needs a group of 2..64");
    if (fmha::kSm90WarpgroupRows % g != 0 && c.block_m != fmha::kSm90WarpgroupRows)
      fail(ErrorKind::not_supported, "nhead_q / nhead_k = " + std::to_string(g) +
                                         ": packed GQA with a group that does "
                                         "not divide 64 needs a 64-row tile (block_m " +
                                         std::to_string(c.block_m) + ")");
    specs.q = packed_view_map(p.q, "q", g, static_cast<uint32_t>(c.block_m / g));
    if (store_o)
      specs.o = packed_view_map(p.o, "o", g, static_cast<uint32_t>(fmha::kSm90WarpgroupRows / g));
  } else {
    specs.q = view_map(p.q, "q", static_cast<uint32_t>(c.block_m));
    if (store_o) specs.o = view_map(p.o, "o", static_cast<uint32_t>(fmha::kSm90WarpgroupRows));
  }
  // Paged K/V: boxes of one page where pages are smaller than the block.
  const auto kv_rows = static_cast<uint32_t>(codegen::sm90_paged_box_rows(c, p));
  specs.k = view_map(p.k, "k", kv_rows);
  specs.v = view_map(p.v, "v", kv_rows);
  specs.kv_grouping = codegen::sm90_kv_grouping(c, p);
  if (const codegen::Sm90KvGrouping& grouping = specs.kv_grouping; grouping.grouped) {
    specs.k = grouped_pool_map(specs.k, static_cast<uint64_t>(c.hdim_q), grouping.heads_in_pages);
    specs.v = grouped_pool_map(specs.v, static_cast<uint64_t>(c.hdim_v), grouping.heads_in_pages);
  }
  return specs;
}

namespace {

// `merged_splits` > 0: a split kernel that merges that many splits in its cluster, with the
// problem's O and LSE in place of partials.
fmha::Sm90FwdParams sm90_params(const Problem& p, const FwdDeviceIndices& indices,
                                const KernelConfig& c, const SplitKv* split,
                                int64_t merged_splits) {
  const bool split_kernel = c.family == Family::fwd_splitkv;
  fmha::Sm90FwdParams params{};
  params.base = make_fwd_params(p, indices, Pipeline::sm90_ws, split);
  if (merged_splits > 0) params.base.num_splits = static_cast<int>(merged_splits);
  const int64_t rows_per_tile = c.pack_gqa ? c.block_m / (p.nhead_q / p.nhead_k) : c.block_m;
  params.m_blocks = static_cast<int>((p.seqlen_q + rows_per_tile - 1) / rows_per_tile);
  params.tile_heads =
      tile::make_fast_divisor(static_cast<unsigned>(c.pack_gqa ? p.nhead_k : p.nhead_q));
  params.tile_splits = tile::make_fast_divisor(static_cast<unsigned>(params.base.num_splits));
  bind_sm90_grid(
      params, c,
      int64_t{params.m_blocks} * params.tile_heads.divisor * p.batch * params.tile_splits.divisor);
  const bool scale_folds = !c.softcap && c.bias == BiasKind::none;
  if (scale_folds && p.scale() < 0)
    fail(ErrorKind::not_supported, "softmax_scale = " + std::to_string(p.scale()) +
                                       ": sm90_ws folds the scale into exp2 and needs it positive");
  const Sm90TensorMapSpecs specs = sm90_tensor_map_specs(p, c);
  auto encode = [](const jit::TiledTensorMapSpec& spec, fmha::Sm90TensorMap& out) {
    const jit::CuTensorMap map = jit::encode_tiled_tensor_map(spec);
    static_assert(sizeof(map) == sizeof(out), "CUtensorMap and Sm90TensorMap differ in size");
    std::memcpy(&out, &map, sizeof(out));
  };
  encode(specs.q, params.q_map);
  encode(specs.k, params.k_map);
  encode(specs.v, params.v_map);
  if (!split_kernel) encode(specs.o, params.o_map);
  params.kv_grouped = specs.kv_grouping.grouped ? 1 : 0;
  params.kv_heads_in_pages = static_cast<int>(specs.kv_grouping.heads_in_pages);
  return params;
}

}  // namespace

fmha::Sm90FwdParams make_fwd_sm90_params(const Problem& p, const FwdDeviceIndices& indices,
                                         const KernelConfig& c, const SplitKv* split) {
  const bool split_kernel = c.family == Family::fwd_splitkv;
  if (split_kernel && split == nullptr && p.family != Family::fwd_splitkv)
    fail(ErrorKind::invalid_argument,
         "split is null and family = " + std::string(to_string(p.family)) +
             ": a fwd_splitkv kernel writes split partials (pass the plan's SplitKv)");
  if (!split_kernel && (split != nullptr || p.family == Family::fwd_splitkv))
    fail(ErrorKind::invalid_argument,
         "family = " + std::string(to_string(c.family)) +
             ": the kernel writes whole rows of O, not split partials (use a fwd_splitkv kernel)");
  return sm90_params(p, indices, c, split, 0);
}

fmha::Sm90FwdParams make_fwd_sm90_cluster_merge_params(const Problem& p,
                                                       const FwdDeviceIndices& indices,
                                                       const KernelConfig& c, int64_t num_splits) {
  if (c.family != Family::fwd_splitkv)
    fail(ErrorKind::invalid_argument, "family = " + std::string(to_string(c.family)) +
                                          ": only fwd_splitkv kernels merge splits in a cluster");
  if (p.family == Family::fwd_splitkv)
    fail(ErrorKind::invalid_argument,
         "family = fwd_splitkv: the problem asks for split partials, which a cluster merge "
         "never writes");
  if (num_splits < 2 || num_splits > codegen::kSm90MaxClusterSplits)
    fail(ErrorKind::invalid_argument,
         "num_splits = " + std::to_string(num_splits) + ": a cluster merges 2.." +
             std::to_string(codegen::kSm90MaxClusterSplits) + " splits");
  return sm90_params(p, indices, c, nullptr, num_splits);
}

void bind_sm90_grid(fmha::Sm90FwdParams& params, const KernelConfig& config, int64_t grid_ctas) {
  // tile_splits is 1 outside split-KV; a default-constructed one (0) counts as 1 too.
  const int64_t splits = params.tile_splits.divisor > 0 ? params.tile_splits.divisor : 1;
  const int64_t tiles =
      int64_t{params.m_blocks} * params.tile_heads.divisor * params.base.batch * splits;
  params.paired =
      config.mask != MaskKind::none && config.family != Family::fwd_splitkv && grid_ctas < tiles
          ? 1
          : 0;
  params.m_slots = tile::make_fast_divisor(
      static_cast<unsigned>(params.paired ? (params.m_blocks + 1) / 2 * 2 : params.m_blocks));
}

}  // namespace tilefmha::runtime
