#include "runtime/bwd_sm90_params.hpp"

#include <cstring>

#include "jit/tensor_map.hpp"
#include "runtime/fwd_sm90_params.hpp"

namespace tilefmha::runtime {
namespace {

struct BwdMapSpecs {
  jit::TiledTensorMapSpec q, d_o, k, v;
};

BwdMapSpecs map_specs(const Problem& p, const KernelConfig& c) {
  const auto query_rows = static_cast<uint32_t>(c.block_m);
  const auto key_rows = static_cast<uint32_t>(c.block_n);
  return {sm90_view_map(p.q, "q", query_rows), sm90_view_map(p.bwd.d_o, "bwd.d_o", query_rows),
          sm90_view_map(p.k, "k", key_rows), sm90_view_map(p.v, "v", key_rows)};
}

void encode(const jit::TiledTensorMapSpec& spec, fmha::Sm90TensorMap& out) {
  const jit::CuTensorMap map = jit::encode_tiled_tensor_map(spec);
  static_assert(sizeof(map) == sizeof(out), "CUtensorMap and Sm90TensorMap differ in size");
  std::memcpy(&out, &map, sizeof(out));
}

}  // namespace

void check_bwd_sm90_views(const Problem& problem, const KernelConfig& config) {
  map_specs(problem, config);
}

fmha::Sm90BwdParams make_bwd_sm90_params(const Problem& problem, const FwdDeviceIndices& indices,
                                         const BackwardScratch& scratch,
                                         const KernelConfig& config) {
  fmha::Sm90BwdParams params{};
  params.base = make_bwd_params(problem, indices, scratch);
  const BwdMapSpecs specs = map_specs(problem, config);
  encode(specs.q, params.q_map);
  encode(specs.d_o, params.do_map);
  encode(specs.k, params.k_map);
  encode(specs.v, params.v_map);
  return params;
}

}  // namespace tilefmha::runtime
