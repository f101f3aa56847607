// Random inputs for the timing commands (bench, sweep): what is timed does not depend on the
// values, only that they are finite and not all alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tilefmha/types.hpp"

namespace tilefmha::cli {

// Resizes `bytes` to `elements` values of `dtype`, uniform in [-range, range], the same for a
// given seed whatever the thread count. FP8 codes take a wider range, which their descales
// bring back near [-1, 1].
void fill_uniform(std::vector<std::byte>& bytes, DType dtype, int64_t elements, uint64_t seed,
                  double range = 1.0);

}  // namespace tilefmha::cli
