// Shared-memory footprint and register estimate of a kernel's tile, checked against the arch
// limits when the tile table is loaded. The formulas are documented in docs/enumeration.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "enumerate/arch_spec.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::enumerate {

struct TileResources {
  int64_t threads = 0;
  int64_t math_threads = 0;  // threads holding accumulators (sm90_ws: all but the producer)
  int64_t smem_bytes = 0;
  int64_t registers_per_thread = 0;  // of a math thread
  int64_t registers_per_block = 0;
};

// Shared memory the kernel's tiles need (dynamic shared memory at launch).
int64_t tile_smem_bytes(const KernelConfig& config);
TileResources estimate_tile_resources(const KernelConfig& config, const RegisterModel& model);

// Why the tile does not fit the arch ("shared memory 245760 B > opt-in limit 232448 B"), or
// nullopt when it fits.
std::optional<std::string> tile_limit_violation(const KernelConfig& config, const ArchSpec& spec);

}  // namespace tilefmha::enumerate
