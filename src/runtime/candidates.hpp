// The kernels a dispatcher may JIT on first use when the caller names none: the `full`
// profile's enumeration for the device arch, restricted to the families a problem runs.
#pragma once

#include <string>
#include <vector>

#include "tilefmha/kernel_config.hpp"

namespace tilefmha::runtime {

// `profile` names a file of data/profiles.
std::vector<KernelConfig> default_candidates(Arch arch, const std::vector<Family>& families,
                                             const std::string& profile = "full");

}  // namespace tilefmha::runtime
