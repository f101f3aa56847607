// The table of kernel templates: the one place that knows which (family, pipeline) pairs have a
// host half, so codegen, enumeration, the dispatcher and run all ask the same object.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "templates/kernel_template.hpp"

namespace tilefmha::templates {

// The template of (family, pipeline), or null when none exists yet.
const KernelTemplate* find_kernel_template(Family family, Pipeline pipeline);

// The families with at least one template: what a GPU plan can run.
std::vector<Family> template_families();

// Why no template can build `config`: it has no (family, pipeline) template, or the template
// refuses one of its fields. nullopt when it can be built.
std::optional<Rejection> build_rejection(const KernelConfig& config);

// The template of `config`; throws Error(not_supported) naming the field when
// build_rejection(config) has a reason.
const KernelTemplate& kernel_template(const KernelConfig& config);

// Runs `check`, turning the Error(not_supported) it throws into a Rejection that keeps the
// error's field ("codegen" when the error names none).
std::optional<Rejection> rejection_of(const std::function<void()>& check);

}  // namespace tilefmha::templates
