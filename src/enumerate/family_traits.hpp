// Facts about kernel families and pipelines that the rules, the tile checks and the dispatcher
// share: which pipelines build a family and which feature traits a family's kernels carry.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "enumerate/field_codes.hpp"
#include "tilefmha/types.hpp"

namespace tilefmha::enumerate {

// Attention families do the two matrix products (sm80_mma / sm90_ws / simt_f32); the others
// are memory-bound helpers with a pipeline of their own.
bool is_attention_family(Family family);
bool is_backward_family(Family family);
// Forward-like: one query tile against streamed key tiles (everything attention but backward).
bool is_forward_like_family(Family family);

// The pipelines that can build a family's kernels.
std::span<const Pipeline> pipelines_for_family(Family family);
bool is_tensor_core_pipeline(Pipeline pipeline);
// The memory-bound helper pipelines (combine, append-KV, dot(dO, O), convert dQ): row-parallel
// kernels that check every bound, so they have no unpadded variants.
bool is_memory_bound_pipeline(Pipeline pipeline);
// Head dims sm90_ws takes: whole 64-element (128-byte) swizzled panels, 64..256.
bool is_sm90_ws_head_dim(int32_t hdim);
// Whether the tile's block_n means something for this pipeline (0 in the tile table if not).
bool pipeline_uses_block_n(Pipeline pipeline);

// The feature-trait fields whose values vary between a family's kernels. A trait a family does
// not carry stays at its default (e.g. rope is none outside fwd_appendkv); the dispatcher
// should compare only carried traits.
std::span<const std::string_view> trait_fields();
// Throws Error(invalid_argument) when trait_field is not one of trait_fields().
bool family_carries(Family family, std::string_view trait_field);
// The carried trait fields of a family as a set of field indices (see field_codes.hpp).
const FieldSet& carried_trait_fields(Family family);

}  // namespace tilefmha::enumerate
