// NVRTC target names. A real architecture (sm_XY) makes NVRTC emit a cubin directly; the `a`
// suffix (sm_90a) unlocks the arch-specific instructions (wgmma, setmaxnreg).
#pragma once

#include <string>
#include <string_view>

#include "tilefmha/types.hpp"

namespace tilefmha::jit {

// Checks the spelling "sm_<digits>[a|f]" and returns it; throws Error(invalid_argument)
// naming the value otherwise. Whether NVRTC supports it is NVRTC's call.
std::string validate_target_arch(std::string_view arch);

// The NVRTC target of a kernel arch: sm90 is the arch-specific sm_90a.
std::string nvrtc_target(Arch arch);

}  // namespace tilefmha::jit
