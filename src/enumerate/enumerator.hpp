// Enumeration: arch spec + rules + allow-lists + filters -> the list of KernelConfigs.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "enumerate/allow_list.hpp"
#include "enumerate/arch_spec.hpp"
#include "enumerate/filter.hpp"
#include "enumerate/profile.hpp"
#include "enumerate/sweep_config.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha::enumerate {

struct EnumerationRequest {
  std::vector<Family> families;
  FieldAllowList allow;                   // sweep config and profile allow-lists together
  std::vector<const FilterSet*> filters;  // all must match (profile `where`, --filter ...)
};

struct Enumeration {
  std::vector<KernelConfig> configs;  // grouped by family, in a fixed order
  std::array<int64_t, enum_count<Family>()> per_family{};
  double seconds = 0;
};

// Every config that the arch's tile table offers, the rules accept, the allow-lists allow and
// the filters match. Rules are checked as soon as the fields they read are set.
Enumeration enumerate_kernels(const ArchSpec& arch, const EnumerationRequest& request);

// The usual composition: a sweep config under a profile, plus extra filters.
Enumeration enumerate_kernels(const ArchSpec& arch, const SweepConfig& config,
                              const Profile& profile, const FilterSet& extra);

}  // namespace tilefmha::enumerate
