// Compiling kernels ahead of their first use (`tilefmha build`, `bench`, the Python package's
// warmup()): one build job per kernel, named and generated exactly as the dispatcher compiles
// it on first use, so that both read and write the same disk cache entries.
#pragma once

#include <span>
#include <vector>

#include "jit/build_pipeline.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::runtime {

// One job per config, in order: named by the config's symbol, with its template's source.
std::vector<jit::BuildJob> build_jobs(std::span<const KernelConfig> configs);

// The configs followed by the launch forms the dispatcher may derive from them per problem
// (heuristics.hpp launch_form: sm90_ws fwd kernels on a persistent grid or with GQA groups
// packed, sm90_ws fwd_splitkv kernels packed and, at hdim 64, packed on warp MMAs), each a cubin
// of its own; only forms codegen
// implements are added. Enumeration yields the plain forms alone.
std::vector<KernelConfig> with_launch_forms(std::span<const KernelConfig> configs);

}  // namespace tilefmha::runtime
