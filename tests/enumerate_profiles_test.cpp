// Golden counts of every sweep config under every profile on sm90 (change them deliberately,
// with the reason in the commit), and the properties every enumeration must have.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_set>

#include "enumerate/enumerator.hpp"
#include "enumerate/rules.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

constexpr std::array<const char*, 8> kProfiles = {"full",    "ci",       "pytorch", "flash",
                                                  "serving", "training", "fp8",     "fp32"};

// sm90 counts per sweep config, in kProfiles order.
const std::map<std::string, std::array<size_t, 8>> kGoldenSm90 = {
    {"all", {294008, 28, 7888, 34720, 129724, 14688, 87896, 46744}},
    {"full_fwd", {30720, 7, 3328, 15936, 8832, 4800, 5760, 5760}},
    {"fwd", {22080, 6, 2560, 15936, 8832, 4800, 2880, 0}},
    {"fwd_ci", {24, 2, 24, 24, 24, 24, 0, 0}},
    {"bwd", {9888, 4, 3360, 6624, 0, 9888, 0, 0}},
    {"splitkv", {24792, 5, 0, 3616, 17344, 0, 6304, 0}},
    {"appendkv", {1056, 4, 0, 96, 636, 0, 408, 216}},
    {"pagedkv", {103680, 4, 0, 8448, 73728, 0, 23040, 0}},
    {"batch_prefill", {42240, 4, 0, 0, 29184, 0, 11520, 0}},
};

const ArchSpec& sm90() {
  static const ArchSpec spec = load_arch_spec(Arch::sm90);
  return spec;
}

Enumeration run(const std::string& config, const std::string& profile,
                const ArchSpec& arch = sm90()) {
  return enumerate_kernels(arch, load_sweep_config(config), load_profile(profile), FilterSet{});
}

}  // namespace

TEST(EnumerateProfiles, GoldenCountsOnSm90) {
  for (const auto& [config, counts] : kGoldenSm90)
    for (size_t p = 0; p < kProfiles.size(); ++p)
      EXPECT_EQ(run(config, kProfiles[p]).configs.size(), counts[p])
          << "config " << config << ", profile " << kProfiles[p];
}

TEST(EnumerateProfiles, EveryProfileIsDescribedData) {
  const auto names = profile_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            std::set<std::string>(kProfiles.begin(), kProfiles.end()));
  for (const char* name : kProfiles) EXPECT_FALSE(load_profile(name).description.empty()) << name;
  EXPECT_THROW(load_profile("receipt0"), Error);
  EXPECT_THROW(load_profile("../profiles/full"), Error);
}

TEST(EnumerateProfiles, EveryFamilyNonEmptyUnderFullOnSm90) {
  const Enumeration all = run("all", "full");
  for (size_t f = 0; f < enum_count<Family>(); ++f)
    EXPECT_GT(all.per_family[f], 0) << to_string(static_cast<Family>(f));
  int64_t sum = 0;
  for (int64_t count : all.per_family) sum += count;
  EXPECT_EQ(size_t(sum), all.configs.size());
}

TEST(EnumerateProfiles, EveryConfigSatisfiesRulesTableAndProfile) {
  const ArchSpec& arch = sm90();
  std::unordered_set<KernelConfig> full;
  for (const KernelConfig& c : run("all", "full").configs) {
    const Rule* broken = first_violated_rule(c);
    ASSERT_EQ(broken, nullptr) << c.name() << " breaks " << broken->name;
    ASSERT_TRUE(full.insert(c).second) << "duplicate " << c.name();
  }
  // Every tile of the arch table is used by some config.
  for (const TileEntry& tile : arch.tiles) {
    bool used = false;
    for (const KernelConfig& c : full) {
      KernelConfig probe = c;
      tile.apply_to(probe);
      used = used || (probe == c && tile.dtype == c.dtype);
      if (used) break;
    }
    EXPECT_TRUE(used) << tile.describe();
  }
  for (const char* name : kProfiles) {
    const Profile profile = load_profile(name);
    for (const KernelConfig& c : run("all", name).configs) {
      ASSERT_TRUE(full.contains(c)) << name << " adds " << c.name();
      ASSERT_TRUE(profile.allow.allows(c)) << name << " allow-list misses " << c.name();
      ASSERT_TRUE(profile.where.matches(c)) << name << " where misses " << c.name();
    }
  }
}

TEST(EnumerateProfiles, ProfilesKeepWhatTheySay) {
  for (const KernelConfig& c : run("all", "pytorch").configs) {
    EXPECT_NE(c.dtype, DType::fp8_e4m3);
    EXPECT_FALSE(c.softcap);
    EXPECT_NE(c.mask, MaskKind::window);
  }
  for (const KernelConfig& c : run("all", "serving").configs) EXPECT_FALSE(c.dropout);
  for (const KernelConfig& c : run("all", "training").configs)
    EXPECT_TRUE(c.family != Family::fwd || c.lse) << c.name();
  for (const KernelConfig& c : run("all", "fp8").configs) EXPECT_TRUE(is_fp8(c.dtype));
  // FlashAttention's fp8 takes per-tensor descales; the combine reads no fp8 data.
  for (const KernelConfig& c : run("all", "flash").configs)
    EXPECT_TRUE(!is_fp8(c.dtype) || c.fp8_scale == Fp8ScaleKind::per_tensor ||
                c.family == Family::fwd_splitkv_combine)
        << c.name();
}

TEST(EnumerateProfiles, CiStaysSmallOnEveryArch) {
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89, Arch::sm90}) {
    const Enumeration ci = run("all", "ci", load_arch_spec(arch));
    EXPECT_GE(ci.configs.size(), 20u) << to_string(arch);
    EXPECT_LE(ci.configs.size(), 40u) << to_string(arch);
    for (size_t f = 0; f < enum_count<Family>(); ++f)
      EXPECT_GT(ci.per_family[f], 0) << to_string(arch) << " " << to_string(Family(f));
  }
}

TEST(EnumerateProfiles, BadProfileExpressionIsNamed) {
  const nlohmann::json profile = {{"description", "x"}, {"where", {"c.lse", "c.hdim_q =="}}};
  try {
    parse_profile(profile, "x", "x.json");
    FAIL();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("where[1]"), std::string::npos) << message;
    EXPECT_NE(message.find("column 12"), std::string::npos) << message;
  }
  EXPECT_THROW(parse_profile({{"description", "x"}, {"allow", {{"mask", {"none"}}}}}, "x", "x"),
               Error);
  EXPECT_THROW(parse_profile({{"allow", nlohmann::json::object()}}, "x", "x"), Error);
}
