#include "runtime/candidates.hpp"

#include <algorithm>

#include "enumerate/enumerator.hpp"

namespace tilefmha::runtime {

std::vector<KernelConfig> default_candidates(Arch arch, const std::vector<Family>& families,
                                             const std::string& profile_name) {
  const auto spec = enumerate::load_arch_spec(arch);
  const auto sweep = enumerate::load_sweep_config("all");
  const auto profile = enumerate::load_profile(profile_name);
  auto all = enumerate::enumerate_kernels(spec, sweep, profile, enumerate::FilterSet{}).configs;
  std::erase_if(all, [&](const KernelConfig& config) {
    return std::find(families.begin(), families.end(), config.family) == families.end();
  });
  return all;
}

}  // namespace tilefmha::runtime
