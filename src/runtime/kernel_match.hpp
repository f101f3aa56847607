// Which kernels can serve which problems: the trait-matching half of the dispatcher. Pure host
// logic (no GPU), so its rules are unit-tested on every machine.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// The kernel families a problem's plan runs, in launch order (DESIGN §2): fwd_splitkv adds the
// combine, every backward family runs the three backward stages.
std::vector<Family> stage_families(const Problem& problem);

// Why `config` cannot serve stage `stage` of `problem` on a device of `arch`, or nullopt when it
// can. The reason names the field, e.g. "mask: kernel causal, problem window".
std::optional<std::string> rejection_reason(const KernelConfig& config, const Problem& problem,
                                            Family stage, Arch arch);

// How far a candidate got through the checks of rejection_reason (higher = closer to fitting):
// the position of the field its reason names, so "no kernel" errors list near misses first.
int match_depth(const std::string& rejection);

}  // namespace tilefmha::runtime
