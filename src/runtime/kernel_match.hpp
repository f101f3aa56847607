// Which kernels can serve which problems: the trait-matching half of the dispatcher. Pure host
// logic (no GPU), so its rules are unit-tested on every machine.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "templates/rejection.hpp"
#include "tilefmha/kernel_config.hpp"
#include "tilefmha/problem.hpp"

namespace tilefmha::runtime {

// The kernel families a problem's plan runs, in launch order (DESIGN §2): fwd_splitkv adds the
// combine, every backward family runs the three backward stages.
std::vector<Family> stage_families(const Problem& problem);

using templates::Rejection;

// Why `config` cannot serve stage `stage` of `problem` on a device of `arch`, or nullopt when it
// can: the field and a reason naming it, e.g. {"mask", "mask: kernel causal, problem window"}.
std::optional<Rejection> match_rejection(const KernelConfig& config, const Problem& problem,
                                         Family stage, Arch arch);
// The reason's text alone.
std::optional<std::string> rejection_reason(const KernelConfig& config, const Problem& problem,
                                            Family stage, Arch arch);
// The dispatcher's whole rule: match_rejection, then whether codegen builds the config and its
// launch form for the problem, then the kernel template's limits only the problem shows (e.g. a
// page size the kernel cannot load).
std::optional<Rejection> dispatch_rejection(const KernelConfig& config, const Problem& problem,
                                            Family stage, Arch arch);

// How far a candidate got through the checks (higher = closer to fitting): the position of the
// rejected field, so "no kernel" errors list near misses first. A kernel template's refusal
// (any config field, or "codegen") ranks after every trait, and a problem limit it refuses
// (seqlen_q, softmax_scale...) after those; unknown fields give -1.
int field_depth(std::string_view field);
// field_depth of the field a "field: ..." reason starts with.
int match_depth(const std::string& rejection);

}  // namespace tilefmha::runtime
