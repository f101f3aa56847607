// Sweep configs: both sections honoured, absent keys allow everything, strict errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "enumerate/data_dir.hpp"
#include "enumerate/enumerator.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;
using nlohmann::json;

namespace {

std::string parse_error(const json& config) {
  try {
    parse_sweep_config(config, "test", "test.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

Enumeration enumerate_config(const json& config) {
  static const ArchSpec sm90 = load_arch_spec(Arch::sm90);
  return enumerate_kernels(sm90, parse_sweep_config(config, "test", "test.json"),
                           load_profile("full"), FilterSet{});
}

}  // namespace

TEST(SweepConfig, EveryDataConfigLoadsByNameAndByPath) {
  const std::set<std::string> expected = {"all", "appendkv", "batch_prefill", "bwd",    "full_fwd",
                                          "fwd", "fwd_ci",   "pagedkv",       "splitkv"};
  const auto names = sweep_config_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);
  for (const std::string& name : names) {
    const SweepConfig by_name = load_sweep_config(name);
    const SweepConfig by_path =
        load_sweep_config((data_dir() / "configs" / (name + ".json")).string());
    EXPECT_EQ(by_name.name, name);
    EXPECT_EQ(by_path.name, name);
    EXPECT_EQ(by_name.families, by_path.families);
    EXPECT_FALSE(by_name.description.empty()) << name;
  }
}

TEST(SweepConfig, VariantsNameFamilyGroups) {
  EXPECT_EQ(variant_families("splitkv"),
            (std::vector<Family>{Family::fwd_splitkv, Family::fwd_splitkv_combine}));
  EXPECT_EQ(
      variant_families("bwd"),
      (std::vector<Family>{Family::bwd_dot_do_o, Family::bwd_dq_dk_dv, Family::bwd_convert_dq}));
  EXPECT_EQ(variant_families("fwd_pagedkv"), std::vector<Family>{Family::fwd_pagedkv});
  EXPECT_EQ(variant_families("all").size(), enum_count<Family>());
  EXPECT_THROW(variant_families("forward"), Error);
  EXPECT_NE(parse_error({{"variant", "forward"}}).find("unknown variant 'forward'"),
            std::string::npos);
}

TEST(SweepConfig, BothSectionsAreHonoured) {
  const json traits = {{"dtype", {{"values", {"fp16"}}}}, {"mask", {{"values", {"causal"}}}}};
  const json tiles = {{"block_n", {{"values", {192}}}}};
  const Enumeration traits_only = enumerate_config({{"variant", "fwd"}, {"trait_config", traits}});
  const Enumeration both =
      enumerate_config({{"variant", "fwd"}, {"trait_config", traits}, {"tile_config", tiles}});
  ASSERT_FALSE(both.configs.empty());
  EXPECT_LT(both.configs.size(), traits_only.configs.size());
  for (const KernelConfig& c : traits_only.configs) {
    EXPECT_EQ(c.dtype, DType::fp16);
    EXPECT_EQ(c.mask, MaskKind::causal);
  }
  size_t with_192 = 0;
  for (const KernelConfig& c : traits_only.configs) with_192 += c.block_n == 192;
  EXPECT_EQ(both.configs.size(), with_192);
  for (const KernelConfig& c : both.configs) {
    EXPECT_EQ(c.block_n, 192);
    EXPECT_EQ(c.dtype, DType::fp16);
  }
}

TEST(SweepConfig, AbsentKeysAllowEverything) {
  const Enumeration all = enumerate_config({{"variant", "fwd"}});
  std::set<int64_t> masks, biases, dtypes, modes, hdims;
  for (const KernelConfig& c : all.configs) {
    masks.insert(int64_t(c.mask));
    biases.insert(int64_t(c.bias));
    dtypes.insert(int64_t(c.dtype));
    modes.insert(int64_t(c.mode));
    hdims.insert(c.hdim_q);
  }
  EXPECT_EQ(masks.size(), enum_count<MaskKind>());
  EXPECT_EQ(biases.size(), enum_count<BiasKind>());
  EXPECT_EQ(dtypes.size(), 5u);  // every attention dtype of sm90
  EXPECT_EQ(modes.size(), 2u);
  EXPECT_EQ(hdims, (std::set<int64_t>{32, 64, 96, 128, 160, 192, 256}));
  // Empty sections restrict nothing either.
  EXPECT_EQ(enumerate_config({{"variant", "fwd"}, {"trait_config", json::object()}}).configs.size(),
            all.configs.size());
}

TEST(SweepConfig, UnknownKeysAndBadValuesAreNamed) {
  auto expect_error = [](const json& config, const std::string& part) {
    const std::string message = parse_error(config);
    EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
  };
  expect_error({{"variant", "fwd"}, {"trait_confg", json::object()}}, "unknown key 'trait_confg'");
  expect_error({{"trait_config", json::object()}}, "missing key 'variant'");
  expect_error({{"variant", "fwd"}, {"trait_config", {{"dtyp", {{"values", {"bf16"}}}}}}},
               "unknown kernel config field 'dtyp'");
  expect_error({{"variant", "fwd"}, {"trait_config", {{"dtype", {{"value", {"bf16"}}}}}}},
               "unknown key 'value'");
  expect_error({{"variant", "fwd"}, {"trait_config", {{"dtype", {{"values", "bf16"}}}}}},
               "'values' must be an array");
  expect_error({{"variant", "fwd"}, {"trait_config", {{"dtype", {{"values", {"bf17"}}}}}}},
               "\"bf17\" is not a value of dtype");
  expect_error({{"variant", "fwd"}, {"trait_config", {{"lse", {{"values", {"true"}}}}}}},
               "\"true\" is not a value of lse (accepted: true, false)");
  expect_error({{"variant", "fwd"}, {"trait_config", {{"hdim_q", {{"values", {"128"}}}}}}},
               "\"128\" is not a value of hdim_q");
  expect_error({{"variant", "fwd"}, {"trait_config", {{"block_m", {{"values", {128}}}}}}},
               "field 'block_m' belongs in tile_config");
  expect_error({{"variant", "fwd"}, {"tile_config", {{"mask", {{"values", {"none"}}}}}}},
               "field 'mask' belongs in trait_config");
  expect_error({{"variant", "fwd"}, {"tile_config", {{"warps", {{"values", {4.5}}}}}}},
               "4.5 is not a value of warps");
}

TEST(SweepConfig, UnknownNamesAndMissingFiles) {
  try {
    load_sweep_config("no_such_config");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("fwd_ci"), std::string::npos) << e.what();
  }
  try {
    load_sweep_config("/nonexistent/dir/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
  }
}

TEST(SweepConfig, MalformedJsonNamesTheFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tilefmha_bad_config_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << "{\"variant\": \"fwd\",";
  try {
    load_sweep_config(path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}
