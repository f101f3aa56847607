// Problem validation: the gate every problem passes before any kernel or reference runs.
#pragma once

#include "tilefmha/problem.hpp"

namespace tilefmha {

// Throws tilefmha::Error(ErrorKind::invalid_problem) naming the first offending field and its
// value; returns normally when the problem is complete and consistent for its family.
void validate(const Problem& problem);

}  // namespace tilefmha
