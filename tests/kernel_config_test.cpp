#include "tilefmha/kernel_config.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <type_traits>
#include <unordered_set>

#include "tilefmha/error.hpp"

using namespace tilefmha;

namespace {

// A config with every field drawn at random from its domain, so round trips cover all fields.
KernelConfig random_config(std::mt19937_64& rng) {
  KernelConfig config;
  for_each_kernel_config_field([&](const auto& field) {
    using T = std::remove_reference_t<decltype(config.*field.member)>;
    if constexpr (std::is_same_v<T, bool>) {
      config.*field.member = rng() % 2 == 1;
    } else if constexpr (std::is_enum_v<T>) {
      config.*field.member = static_cast<T>(rng() % enum_count<T>());
    } else {
      const int32_t choices[] = {0, 1, 16, 32, 64, 96, 128, 176, 192, 256, 1024};
      config.*field.member = choices[rng() % std::size(choices)];
    }
  });
  return config;
}

}  // namespace

TEST(KernelConfig, DefaultNameIsShortAndParses) {
  const KernelConfig config;
  EXPECT_EQ(config.name(), "fwd.sm90.bf16.batch.sm80_mma.hq128.hv128.m128.n64.k32.w4.s2");
  EXPECT_EQ(KernelConfig::parse_name(config.name()), config);
}

TEST(KernelConfig, RandomConfigsRoundTripThroughNameAndJson) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const KernelConfig config = random_config(rng);
    ASSERT_EQ(KernelConfig::parse_name(config.name()), config) << config.name();
    nlohmann::json json = config;
    ASSERT_EQ(json.get<KernelConfig>(), config) << json.dump();
  }
}

TEST(KernelConfig, DistinctConfigsHaveDistinctNamesAndMostlyDistinctHashes) {
  std::mt19937_64 rng(11);
  std::set<std::string> names;
  std::unordered_set<size_t> hashes;
  std::vector<KernelConfig> configs;
  for (int trial = 0; trial < 2000; ++trial) configs.push_back(random_config(rng));
  std::set<std::string> unique_configs;
  for (const auto& config : configs) {
    nlohmann::json json = config;
    if (!unique_configs.insert(json.dump()).second) continue;
    ASSERT_TRUE(names.insert(config.name()).second) << config.name();
    hashes.insert(config.hash());
  }
  EXPECT_GE(hashes.size(), unique_configs.size() - 1);
}

TEST(KernelConfig, SymbolIsAnIdentifier) {
  KernelConfig config;
  config.mask = MaskKind::window;
  config.page_table = PageTableKind::sglang_page_list;
  for (char c : config.symbol())
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_');
}

TEST(KernelConfig, OutDtypeFollowsDtypeUnlessSet) {
  KernelConfig config;
  config.dtype = DType::fp16;
  config.out_dtype = DType::fp16;
  EXPECT_EQ(config.name().find("out-"), std::string::npos);
  config.dtype = DType::fp8_e4m3;
  config.out_dtype = DType::bf16;
  EXPECT_NE(config.name().find("out-bf16"), std::string::npos);
  EXPECT_EQ(KernelConfig::parse_name(config.name()), config);
}

TEST(KernelConfig, BadNamesAreRejectedWithTheirSegment) {
  const std::string good = KernelConfig{}.name();
  EXPECT_THROW(KernelConfig::parse_name("fwd.sm90"), Error);
  try {
    KernelConfig::parse_name(good + ".bogus-3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bogus-3"), std::string::npos);
  }
  try {
    KernelConfig::parse_name("fwd.sm77.bf16.batch.sm80_mma.hq128");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sm77"), std::string::npos);
  }
  EXPECT_THROW(KernelConfig::parse_name(good + ".mask-causal.mask-window"), Error);
}

TEST(KernelConfig, FieldAccessByName) {
  KernelConfig config;
  set_field(config, "mask", "causal");
  set_field(config, "hdim_q", "64");
  set_field(config, "lse", "true");
  EXPECT_EQ(config.mask, MaskKind::causal);
  EXPECT_EQ(std::get<std::string>(get_field(config, "mask")), "causal");
  EXPECT_EQ(std::get<int64_t>(get_field(config, "hdim_q")), 64);
  EXPECT_TRUE(std::get<bool>(get_field(config, "lse")));
  EXPECT_TRUE(has_kernel_config_field("page_size"));
  EXPECT_FALSE(has_kernel_config_field("pagesize"));
  EXPECT_THROW(get_field(config, "nope"), Error);
  EXPECT_THROW(set_field(config, "hdim_q", "12x"), Error);
  EXPECT_THROW(set_field(config, "mask", "diagonal"), Error);
}

TEST(KernelConfig, JsonRejectsUnknownKeysAndBadValues) {
  EXPECT_THROW(nlohmann::json({{"hdim", 64}}).get<KernelConfig>(), Error);
  EXPECT_THROW(nlohmann::json({{"mask", "diagonal"}}).get<KernelConfig>(), Error);
  EXPECT_THROW(nlohmann::json({{"hdim_q", 1.5}}).get<KernelConfig>(), Error);
  const auto partial = nlohmann::json({{"dtype", "fp16"}, {"hdim_q", 64}}).get<KernelConfig>();
  EXPECT_EQ(partial.out_dtype, DType::fp16);
  EXPECT_EQ(partial.hdim_q, 64);
}
