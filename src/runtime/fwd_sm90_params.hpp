// Problem -> Sm90FwdParams of the sm90_ws forward kernel: the portable FwdParams (same checks as
// make_fwd_params) plus TMA tensor maps of Q, K, V and O encoded from the views' strides, so
// bshd, bhsd and gapped layouts all work without copies.
#pragma once

#include "codegen/fwd_sm90.hpp"
#include "fmha/fwd_sm90_params.h"
#include "jit/tensor_map.hpp"
#include "runtime/fwd_params.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// The tensor maps a kernel needs, before encoding: 4D [dim, seq, head, batch] over each view
// with 128-byte swizzle and boxes of 64 elements by the tile's rows. A fwd_splitkv kernel stores
// no O by TMA: its `o` stays default (empty dims) and the problem needs no O view.
struct Sm90TensorMapSpecs {
  jit::TiledTensorMapSpec q, k, v, o;
  // Paged K and V in 8-row groups: their maps are then 5D (codegen::sm90_kv_grouping).
  codegen::Sm90KvGrouping kv_grouping;
};

// Needs no driver. Throws Error(not_supported) naming the view and field when TMA cannot
// address it (a stride not a multiple of 16 bytes or past 2^40, a misaligned base, a non-unit
// dim stride), and Error(invalid_argument) when the problem's dtype or head dims differ from
// the config's.
// A 4D map [dim, seq, head, batch] over a logical [batch, seq, head, dim] view, 128B-swizzled
// boxes of one 128-byte row by `box_rows`. Throws Error(not_supported) naming the field where
// TMA cannot address the view (alignment, strides, extents).
jit::TiledTensorMapSpec sm90_view_map(const TensorView& view, const char* field, uint32_t box_rows);

Sm90TensorMapSpecs sm90_tensor_map_specs(const Problem& problem, const KernelConfig& config);

// make_fwd_params, the sm90 restrictions (softmax_scale > 0 where the scale folds into the
// exponent), then the encoded maps, for a grid of one CTA per tile. Encoding needs the CUDA
// driver.
//
// Split-KV: a fwd_splitkv config writes the partials of `split` (a fwd problem planned in two
// stages, its partials in the plan workspace) or, when null, of a fwd_splitkv problem's own
// problem.split; the scheduler counts take its num_splits and no O map is encoded
// (make_fwd_params checks the partials: fp32 device views, 8-byte aligned, even strides, as the
// kernel stores pairs of floats). A fwd config takes no split. Error(invalid_argument) names the
// family when a split goes to a fwd kernel or a fwd_splitkv kernel has none.
fmha::Sm90FwdParams make_fwd_sm90_params(const Problem& problem, const FwdDeviceIndices& indices,
                                         const KernelConfig& config,
                                         const SplitKv* split = nullptr);

// The parameters of a fwd_splitkv kernel's cluster-merge entry (codegen::sm90_cluster_merge_entry)
// for a fwd or fwd_pagedkv problem: O, LSE and the sink logit from the problem, `num_splits`
// (2..codegen::kSm90MaxClusterSplits, the cluster's size) in place of partials.
fmha::Sm90FwdParams make_fwd_sm90_cluster_merge_params(const Problem& problem,
                                                       const FwdDeviceIndices& indices,
                                                       const KernelConfig& config,
                                                       int64_t num_splits);

// Fits the scheduler fields of `params` to a launch of `grid_ctas` CTAs: tiles are numbered in
// pairs (fwd_sm90_scheduler.h) where the grid has fewer CTAs than tiles and the mask gives
// query blocks unequal key counts. Split-KV tiles (every split counted) are never paired.
void bind_sm90_grid(fmha::Sm90FwdParams& params, const KernelConfig& config, int64_t grid_ctas);

}  // namespace tilefmha::runtime
