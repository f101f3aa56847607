// dBias of an elementwise bias, reduced over the bias's broadcast dimensions.
#pragma once

#include "tilefmha/problem.hpp"

namespace tilefmha::reference::detail {

// Writes bwd.dbias[b, h, i, j] = sum of dS over every (b, h, i, j) that shares the element
// through zero strides; elements of no visible pair get 0. Reads bwd.d, so it runs after
// bwd_dot_do_o.
void write_dbias(const Problem& problem);

}  // namespace tilefmha::reference::detail
