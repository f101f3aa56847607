// Every kernel of the `ci` profile that codegen implements compiles with NVRTC for sm_90a and
// sm_80 in compile-only mode (no GPU needed); the rest are counted as not implemented, never
// silently dropped.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/run_cli.hpp"

using tilefmha::testing::run_cli;

namespace {

void expect_ci_profile_builds(const std::string& arch) {
  const auto cache = std::filesystem::path(::testing::TempDir()) / ("tilefmha_ci_cache_" + arch);
  std::filesystem::remove_all(cache);
  const auto result = run_cli("build all --profile ci --arch " + arch +
                              " --compile-only --no-progress --cache-dir " + cache.string());
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("failures               0"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("kernels built          0"), std::string::npos) << result.output;
}

}  // namespace

TEST(CiProfile, CompilesForSm90a) {
  expect_ci_profile_builds("sm90");
}
TEST(CiProfile, CompilesForSm80) {
  expect_ci_profile_builds("sm80");
}
