// The check every kernel's parameter binding makes of a view it reads or writes.
#pragma once

#include <string>

#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// Throws unless `view` is set, in device memory, of `rank`, with a contiguous last dim; the
// message names `field`.
void require_device_view(const TensorView& view, const std::string& field, int rank);

}  // namespace tilefmha::runtime
