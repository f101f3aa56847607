// Random inputs for the timing commands (bench, sweep): what is timed does not depend on the
// values, only that they are finite and not all alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tilefmha/types.hpp"

namespace tilefmha::cli {

// Resizes `bytes` to `elements` values of `dtype`, uniform in [-1, 1], the same for a given seed
// whatever the thread count.
void fill_uniform(std::vector<std::byte>& bytes, DType dtype, int64_t elements, uint64_t seed);

}  // namespace tilefmha::cli
