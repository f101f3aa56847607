// `tilefmha run --backend auto` (what scripts/quickstart.sh runs): the GPU where one is usable
// and the family runs there, the CPU reference otherwise. Labelled cpu: it asserts whichever
// choice this machine calls for, so it runs (and means something) on both kinds of machine.
#include <gtest/gtest.h>

#include <string>

#include "jit/cuda_driver.hpp"
#include "support/run_cli.hpp"

namespace tilefmha {
namespace {

using testing::CliResult;
using testing::run_cli;

const std::string kSmall = " --seqlen-q 16 --hdim-q 32 --nhead-q 2 --threads 2";

TEST(CliBackendAuto, ForwardRunsOnTheGpuWhenOneIsUsableElseOnTheCpu) {
  const CliResult result = run_cli("run --backend auto" + kSmall);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const bool gpu = jit::gpu_unavailable_reason().empty();
  EXPECT_NE(result.output.find(gpu ? "| backend gpu " : "| backend cpu, 2 threads"),
            std::string::npos)
      << result.output;
}

TEST(CliBackendAuto, FamiliesTheGpuDoesNotRunStayOnTheCpu) {
  const CliResult result = run_cli("run --backend auto --family bwd" + kSmall);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("| backend cpu, 2 threads"), std::string::npos) << result.output;
}

TEST(CliBackendAuto, UnknownBackendsAreStillRefused) {
  const CliResult result = run_cli("run --backend tpu" + kSmall);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("--backend"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("auto"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace tilefmha
