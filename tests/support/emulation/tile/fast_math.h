// Host shim of kernels/tile/fast_math.h (exact functions stand in for the SFU approximations).
#pragma once

#include "support/emulated_fast_math.hpp"
