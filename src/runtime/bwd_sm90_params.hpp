// Launch parameters of the sm90_ws backward kernel: the portable BwdParams and the TMA maps of
// Q, dO, K and V (kernels/fmha/bwd_sm90_params.h).
#pragma once

#include "fmha/bwd_sm90_params.h"
#include "runtime/bwd_params.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Throws Error(not_supported) naming the view TMA cannot address.
fmha::Sm90BwdParams make_bwd_sm90_params(const Problem& problem, const FwdDeviceIndices& indices,
                                         const BackwardScratch& scratch,
                                         const KernelConfig& config);

// The maps alone (no device memory touched): what can_implement asks before a plan commits.
void check_bwd_sm90_views(const Problem& problem, const KernelConfig& config);

}  // namespace tilefmha::runtime
