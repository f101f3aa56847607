// `tilefmha sweep` on the GPU for the serving families: every pagedkv and batch_prefill shape of
// the smoke tier timed through the portable sm80_mma paged kernels (both table forms' kernels
// built, both KV layouts, any-size and specialized pages) and validated against the CPU
// reference by default. Skipped, and reported so, without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "bench/matrix.hpp"
#include "jit/module.hpp"
#include "runtime/device_info.hpp"
#include "support/gpu_availability.hpp"
#include "support/run_cli.hpp"
#include "support/scratch_dirs.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;

// The smoke tier's paged shapes are bf16 head-dim 128 with no feature but the mask; batch-mode
// pagedkv kernels only, so the build stays at a few dozen.
const char* kFilter =
    "--filter \"c.pipeline == 'sm80_mma' and c.dtype == 'bf16' and c.hdim_q == 128 and "
    "c.pad_seqlen_k and not c.pad_hdim_q and not c.lse and not c.softcap and not c.sink_logit "
    "and not c.dropout and c.bias == 'none' and c.mask != 'window' and (c.mode == 'batch' or "
    "c.family == 'batch_prefill')\"";

void expect_served_and_validated(const std::string& variant, Family family) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  std::string arch;
  {
    const jit::GpuContext context;
    arch = to_string(runtime::query_current_device().arch);
  }
  const fs::path dir = testing::fresh_test_dir("cli_sweep_gpu_test");
  const fs::path json = dir / (variant + ".json");
  // No --validate: it is the default for the serving families.
  const testing::CliResult result =
      testing::run_cli("sweep --category smoke --variant " + variant + " --arch " + arch +
                       " --no-progress --warmup 1 --repeat 3 " + kFilter + " --cache-dir " +
                       (dir / "cache").string() + " --json " + json.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream json_file(json);
  const nlohmann::json root = nlohmann::json::parse(json_file);
  EXPECT_EQ(root["validated"], true);

  std::set<std::string> shapes_served;
  std::set<std::string> layouts;
  for (const nlohmann::json& row : root["rows"]) {
    const std::string what = row["shape"].get<std::string>() + " " + row["kernel_name"].dump();
    ASSERT_EQ(row["status"], "match") << what << ": " << row["reason"];
    EXPECT_EQ(row["validated"], true) << what << ": " << row["validation"];
    EXPECT_EQ(row["validation"].get<std::string>().rfind("passed", 0), 0u) << what;
    EXPECT_GE(row["max_abs_error"].get<double>(), 0.0) << what;
    EXPECT_GT(row["median_ms"].get<double>(), 0.0) << what;
    shapes_served.insert(row["shape"].get<std::string>());
    layouts.insert(row["kv_layout"].get<std::string>());
  }
  size_t shapes = 0;
  for (const auto& s : bench::load_matrix_tier("smoke")) shapes += s.family == family;
  EXPECT_GT(shapes, 0u);
  EXPECT_EQ(shapes_served.size(), shapes);
  EXPECT_EQ(layouts, (std::set<std::string>{"hnd", "nhd"}));
}

TEST(CliSweepGpu, PagedKvSmokeTierServedAndValidated) {
  expect_served_and_validated("pagedkv", Family::fwd_pagedkv);
}

TEST(CliSweepGpu, BatchPrefillSmokeTierServedAndValidated) {
  expect_served_and_validated("batch_prefill", Family::batch_prefill);
}

}  // namespace
}  // namespace tilefmha
