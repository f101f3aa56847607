// Host stand-in for kernels/tile/fast_math.h (see tests/emulation/README.md): the SFU's
// approximations, exact on the host.
#pragma once

#include "support/emulated_fast_math.hpp"
