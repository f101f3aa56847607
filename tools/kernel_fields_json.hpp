// The kernel identity columns that bench and sweep rows share: one column per KernelConfig
// field, so that a row read back rebuilds its kernel.
#pragma once

#include <nlohmann/json.hpp>

#include "tilefmha/kernel_config.hpp"

namespace tilefmha::cli {

// Sets out[<field name>] for every field of the single field table: the field's value, or null
// for each field when there is no kernel.
void put_kernel_fields(nlohmann::ordered_json& out, const KernelConfig* kernel);

}  // namespace tilefmha::cli
