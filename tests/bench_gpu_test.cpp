// GPU timing and `tilefmha bench` / `tilefmha build` end to end on a GPU. Skipped (reported as
// skipped) without a GPU, driver or NVRTC.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "jit/module.hpp"
#include "runtime/timing.hpp"
#include "support/gpu_availability.hpp"
#include "support/run_cli.hpp"
#include "support/scratch_dirs.hpp"
#include "tilefmha/kernel_config.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::gpu_skip_reason;
using testing::run_cli;

fs::path fresh_dir() {
  return testing::fresh_test_dir("bench_gpu_test");
}

class BenchGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(BenchGpu, EventTimesGrowWithTheWork) {
  jit::GpuContext context;
  jit::Stream stream;
  // 2 GiB: long enough (0.4 ms even at an H200's 4.8 TB/s) to dwarf a launch's few microseconds.
  jit::DeviceBuffer small(int64_t{1} << 20), large(int64_t{2048} << 20);
  const runtime::TimingOptions options{2, 9, false};
  const auto small_ms = runtime::time_on_gpu([&](jit::CUstream s) { small.fill_bytes_async(1, s); },
                                             options, stream.handle());
  const auto large_ms = runtime::time_on_gpu([&](jit::CUstream s) { large.fill_bytes_async(1, s); },
                                             options, stream.handle());
  ASSERT_EQ(large_ms.samples.size(), 9u);
  EXPECT_GT(small_ms.min, 0.0);
  EXPECT_LE(large_ms.min, large_ms.median);
  EXPECT_LE(large_ms.median, large_ms.max);
  // 2048 times the bytes: at least 20 times the time, whatever the launch overhead.
  EXPECT_GT(large_ms.median, 20 * small_ms.median)
      << small_ms.median << " ms vs " << large_ms.median << " ms";
}

TEST_F(BenchGpu, L2FlushStaysOutsideTheTimedInterval) {
  jit::GpuContext context;
  jit::Stream stream;
  jit::DeviceBuffer buffer(int64_t{1} << 20);
  runtime::L2Flusher flusher;
  const auto launch = [&](jit::CUstream s) { buffer.fill_bytes_async(2, s); };
  const auto plain = runtime::time_on_gpu(launch, {2, 9, false}, stream.handle());
  const auto flushed = runtime::time_on_gpu(launch, {2, 9, true}, stream.handle(), &flusher);
  // Writing 256 MB takes ~0.1 ms or more; a 1 MB memset with a cold L2 stays far below that.
  EXPECT_LT(flushed.median, 0.05) << "the flush leaked into the measurement";
  EXPECT_LT(plain.median, 0.05);
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      cell += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cells.push_back(cell);
      cell.clear();
    } else {
      cell += c;
    }
  }
  cells.push_back(cell);
  return cells;
}

TEST_F(BenchGpu, BenchTimesVerifiesAndWritesRebuildableRows) {
  const fs::path dir = fresh_dir();
  const fs::path sweep = dir / "sweep.json";
  std::ofstream(sweep) << R"({"protocol": {"total_tokens": 2048, "hidden": 1024}, "dtype": "bf16",
      "hdim": [128], "seqlen": [512, 1024], "causal": [false, true]})";
  const CliResult result =
      run_cli("bench --no-progress --verify --lse --warmup 1 --repeat 5 --sweep " + sweep.string() +
              " --csv " + (dir / "rows.csv").string() + " --json " + (dir / "rows.json").string() +
              " --cache-dir " + (dir / "cache").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("summary: 4 shapes: 4 timed"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("verify 4 passed, 0 failed"), std::string::npos) << result.output;

  std::ifstream csv(dir / "rows.csv");
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  const std::vector<std::string> header = split_csv_line(line);
  const auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << "no column " << name;
    return static_cast<size_t>(it - header.begin());
  };
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    const std::vector<std::string> cells = split_csv_line(line);
    ASSERT_EQ(cells.size(), header.size()) << line;
    EXPECT_EQ(cells[column("status")], "ok");
    EXPECT_EQ(cells[column("verify")], "passed");
    EXPECT_FALSE(cells[column("card")].empty());
    EXPECT_GT(std::stod(cells[column("tflops")]), 0.0);
    EXPECT_LE(std::stod(cells[column("min_ms")]), std::stod(cells[column("median_ms")]));
    EXPECT_EQ(cells[column("problem_hdim_q")], "128");
    // The identity columns rebuild the kernel the name describes.
    KernelConfig rebuilt;
    for_each_kernel_config_field([&](const auto& field) {
      set_field(rebuilt, field.name, cells[column(std::string(field.name))]);
    });
    EXPECT_EQ(rebuilt, KernelConfig::parse_name(cells[column("kernel_name")]));
    EXPECT_EQ(rebuilt.family, Family::fwd);
    EXPECT_TRUE(rebuilt.lse);
    EXPECT_EQ(rebuilt.mask == MaskKind::none, cells[column("problem_causal")] == "false");
  }
  EXPECT_EQ(rows, 4);
  std::ifstream json(dir / "rows.json");
  std::stringstream text;
  text << json.rdbuf();
  EXPECT_NE(text.str().find("\"rows\""), std::string::npos);
  EXPECT_NE(text.str().find("\"CUDA events\""), std::string::npos);
}

// FP8 e4m3 shapes (codes in [-64, 64], per-tensor descales near 1/64, bf16 O) on Hopper: timed
// with the same FLOP count as the 16-bit shapes, on an fp8 sm90_ws kernel, and verified in
// whole (short shapes fit the reference's budget) within the fp8 tolerance, LSE included.
TEST_F(BenchGpu, Fp8ShapesTimeAndVerifyOnHopper) {
  if (jit::GpuContext().compute_capability() != 90)
    GTEST_SKIP() << "the fp8 kernels need an sm_90 GPU";
  const fs::path dir = fresh_dir();
  const fs::path sweep = dir / "sweep.json";
  std::ofstream(sweep) << R"({"protocol": {"total_tokens": 1024, "hidden": 1024}, "dtype": "bf16",
      "hdim": [128], "seqlen": [512], "causal": [false, true]})";
  const CliResult result =
      run_cli("bench --no-progress --verify --lse --dtype fp8_e4m3 --warmup 1 --repeat 3 --sweep " +
              sweep.string() + " --csv " + (dir / "rows.csv").string() + " --cache-dir " +
              (dir / "cache").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("summary: 2 shapes: 2 timed"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("verify 2 passed, 0 failed"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("all batches, heads and rows"), std::string::npos) << result.output;

  std::ifstream csv(dir / "rows.csv");
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  const std::vector<std::string> header = split_csv_line(line);
  const auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << "no column " << name;
    return static_cast<size_t>(it - header.begin());
  };
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    const std::vector<std::string> cells = split_csv_line(line);
    ASSERT_EQ(cells.size(), header.size()) << line;
    EXPECT_EQ(cells[column("status")], "ok") << cells[column("message")];
    EXPECT_EQ(cells[column("verify")], "passed");
    EXPECT_EQ(cells[column("problem_dtype")], "fp8_e4m3");
    EXPECT_EQ(cells[column("dtype")], "fp8_e4m3");
    EXPECT_EQ(cells[column("out_dtype")], "bf16");
    EXPECT_EQ(cells[column("fp8_scale")], "per_tensor");
    EXPECT_EQ(cells[column("pipeline")], "sm90_ws");
    const double causal = cells[column("problem_causal")] == "true" ? 0.5 : 1.0;
    EXPECT_NEAR(std::stod(cells[column("gflop")]), 4.0 * 2 * 8 * 512 * 512 * 128 * causal / 1e9,
                1e-6);
    EXPECT_GT(std::stod(cells[column("tflops")]), 0.0);
  }
  EXPECT_EQ(rows, 2);
}

TEST_F(BenchGpu, BuildLoadsEveryKernelIntoTheRegistry) {
  const fs::path dir = fresh_dir();
  jit::GpuContext context;
  const std::string arch = context.compute_capability() >= 90 ? "sm90" : "sm80";
  const CliResult result = run_cli("build fwd_ci --no-progress --arch " + arch +
                                   " --filter \"c.dtype == 'bf16' and c.hdim_q == 128\" "
                                   "--supported-only --cache-dir " +
                                   dir.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(result.output, match, std::regex("to build +(\\d+)")));
  const std::string built = match[1];
  EXPECT_NE(result.output.find("loaded                 " + built + " into the registry"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace tilefmha
