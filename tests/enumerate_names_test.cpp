// Canonical names of enumerated kernels: unique, and each parses back to its config.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "enumerate/enumerator.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

Enumeration everything(Arch arch) {
  return enumerate_kernels(load_arch_spec(arch), load_sweep_config("all"), load_profile("full"),
                           FilterSet{});
}

}  // namespace

TEST(EnumerateNames, UniqueAndRoundTripOnSm90) {
  const Enumeration all = everything(Arch::sm90);
  ASSERT_FALSE(all.configs.empty());
  std::unordered_set<std::string> names;
  names.reserve(all.configs.size());
  for (const KernelConfig& c : all.configs) {
    const std::string name = c.name();
    ASSERT_TRUE(names.insert(name).second) << "duplicate name " << name;
    ASSERT_EQ(KernelConfig::parse_name(name), c) << name;
  }
}

TEST(EnumerateNames, UniqueAndRoundTripOnOtherArchs) {
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89}) {
    const Enumeration all = everything(arch);
    std::unordered_set<std::string> names;
    // Every 7th config keeps the test fast; uniqueness of the config set is checked in full.
    std::unordered_set<KernelConfig> configs(all.configs.begin(), all.configs.end());
    EXPECT_EQ(configs.size(), all.configs.size()) << to_string(arch);
    for (size_t i = 0; i < all.configs.size(); i += 7) {
      const std::string name = all.configs[i].name();
      ASSERT_TRUE(names.insert(name).second) << name;
      ASSERT_EQ(KernelConfig::parse_name(name), all.configs[i]) << name;
      ASSERT_EQ(all.configs[i].arch, arch);
    }
  }
}

TEST(EnumerateNames, JsonRoundTrip) {
  const Enumeration all = everything(Arch::sm90);
  for (size_t i = 0; i < all.configs.size(); i += 97) {
    const nlohmann::json json = all.configs[i];
    EXPECT_EQ(json.get<KernelConfig>(), all.configs[i]) << json.dump();
  }
}
