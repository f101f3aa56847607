// `tilefmha run --backend auto` (what scripts/quickstart.sh runs): the GPU where one is usable
// and the family runs there, the CPU reference otherwise. Labelled cpu: it asserts whichever
// choice this machine calls for, so it runs (and means something) on both kinds of machine.
#include <gtest/gtest.h>

#include <string>

#include "jit/cuda_driver.hpp"
#include "jit/module.hpp"
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

// FP8 forwards follow the same rule: the reference without a GPU, sm90_ws on a Hopper GPU
// (elsewhere the engine has no fp8 kernel, so the run exits 1 naming the closest ones).
TEST(CliBackendAuto, Fp8ForwardFollowsTheSameRule) {
  const bool gpu = jit::gpu_unavailable_reason().empty();
  if (gpu && jit::GpuContext().compute_capability() != 90)
    GTEST_SKIP() << "the fp8 kernels need an sm_90 GPU";
  for (const char* scale : {"per_tensor", "per_block"}) {
    const CliResult result =
        run_cli(std::string("run --backend auto --dtype fp8_e4m3 --fp8-scale ") + scale +
                " --seqlen-q 16 --hdim-q 128 --nhead-q 2 --threads 2");
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("fp8_e4m3"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(gpu ? "| backend gpu " : "| backend cpu, 2 threads"),
              std::string::npos)
        << result.output;
  }
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
