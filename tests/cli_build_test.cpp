// `tilefmha build` end to end on the CPU: --compile-only with a small filter, cache hits on the
// second run, kernels codegen does not implement yet, failures with their logs, bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "jit/cuda_driver.hpp"
#include "support/run_cli.hpp"
#include "support/scratch_dirs.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

// Two sm80 forward kernels (bf16, head dim 64, with and without causal mask): a few seconds of
// NVRTC on two cores.
const std::string kSmallBuild =
    "build fwd_ci --arch sm80 --no-progress --filter \"c.dtype == 'bf16' and c.hdim_q == 64\"";

fs::path fresh_dir() {
  return testing::fresh_test_dir("cli_build_test");
}

// The number printed after `label` at the start of a report line, or -1.
long long count_of(const std::string& output, const std::string& label) {
  const std::regex line("(^|\n)  " + label + " +(\\d+)");
  std::smatch match;
  if (!std::regex_search(output, match, line)) return -1;
  return std::stoll(match[2]);
}

long long listed_count(const std::string& filter_flags, const std::string& config,
                       const std::string& arch) {
  const CliResult list =
      run_cli("list " + config + " --arch " + arch + " --count-only " + filter_flags);
  EXPECT_EQ(list.exit_code, 0) << list.output;
  return std::stoll(list.output);
}

size_t files_in(const fs::path& dir) {
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) count += entry.is_regular_file();
  return count;
}

TEST(CliBuild, CompileOnlyBuildsEveryEnumeratedKernelThenHitsTheCache) {
  const fs::path cache = fresh_dir() / "cache";
  const std::string flags = kSmallBuild + " --compile-only --cache-dir " + cache.string();
  const long long enumerated =
      listed_count("--filter \"c.dtype == 'bf16' and c.hdim_q == 64\"", "fwd_ci", "sm80");
  ASSERT_GT(enumerated, 0);

  const CliResult first = run_cli(flags);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(count_of(first.output, "enumerated"), enumerated) << first.output;
  const long long to_build = count_of(first.output, "to build");
  EXPECT_EQ(to_build + count_of(first.output, "not implemented"), enumerated) << first.output;
  ASSERT_GT(to_build, 0) << first.output;
  EXPECT_EQ(count_of(first.output, "kernels built"), to_build) << first.output;
  EXPECT_EQ(count_of(first.output, "cache hits"), 0) << first.output;
  EXPECT_EQ(count_of(first.output, "failures"), 0) << first.output;
  EXPECT_NE(first.output.find("skipped (--compile-only)"), std::string::npos);
  EXPECT_NE(first.output.find("NVRTC target sm_80"), std::string::npos) << first.output;
  EXPECT_TRUE(std::regex_search(first.output, std::regex("JIT s/kernel \\(mean\\) +[0-9.]+\n")))
      << first.output;
  EXPECT_EQ(files_in(cache), static_cast<size_t>(to_build)) << "one cache entry per kernel";

  const CliResult second = run_cli(flags);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(count_of(second.output, "kernels built"), 0) << second.output;
  EXPECT_EQ(count_of(second.output, "cache hits"), to_build) << second.output;
  EXPECT_NE(second.output.find("n/a (nothing compiled)"), std::string::npos) << second.output;
  EXPECT_EQ(files_in(cache), static_cast<size_t>(to_build));
}

TEST(CliBuild, CacheDirectoryComesFromTheEnvironment) {
  const fs::path cache = fresh_dir() / "from_env";
  ASSERT_EQ(setenv("TILEFMHA_CACHE_DIR", cache.c_str(), 1), 0);
  // Each --filter takes one expression, so the config may follow them.
  const CliResult result = run_cli(
      "build --compile-only --no-progress --arch sm80 --filter \"c.dtype == 'bf16'\" "
      "--filter \"c.hdim_q == 64 and c.mask == 'none'\" fwd_ci");
  unsetenv("TILEFMHA_CACHE_DIR");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find(cache.string()), std::string::npos) << result.output;
  EXPECT_EQ(count_of(result.output, "enumerated"),
            listed_count("--filter \"c.dtype == 'bf16' and c.hdim_q == 64 and c.mask == 'none'\"",
                         "fwd_ci", "sm80"));
  EXPECT_EQ(files_in(cache), static_cast<size_t>(count_of(result.output, "kernels built")));
}

TEST(CliBuild, KernelsCodegenLacksAreListedNotFailed) {
  // Backward kernels are enumerated for sm80; each one codegen rejects is listed with the
  // reason and counted apart from failures.
  const fs::path cache = fresh_dir();
  const std::string filter =
      " --filter \"c.dtype == 'bf16' and c.hdim_q == 64 and c.mask == 'none' and c.bias == "
      "'none' and c.mode == 'batch' and not c.dropout\"";
  const CliResult result = run_cli(
      "build bwd --arch sm80 --compile-only --no-progress --cache-dir " + cache.string() + filter);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const long long missing = count_of(result.output, "not implemented");
  const long long built = count_of(result.output, "to build");
  EXPECT_EQ(missing + built, listed_count(filter, "bwd", "sm80")) << result.output;
  const std::regex listed("  not implemented: (\\S+): (\\S.*)\n");
  long long lines = 0;
  for (auto it = std::sregex_iterator(result.output.begin(), result.output.end(), listed);
       it != std::sregex_iterator(); ++it) {
    ++lines;
    EXPECT_NE((*it)[2].str().find(" = "), std::string::npos)
        << "reason names a field: " << it->str();
  }
  EXPECT_EQ(lines, missing);
  EXPECT_EQ(count_of(result.output, "failures"), 0);

  const CliResult quiet = run_cli(
      "build bwd --arch sm80 --compile-only --no-progress --supported-only "
      "--cache-dir " +
      cache.string() + filter);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("not implemented"), std::string::npos) << quiet.output;
}

TEST(CliBuild, CompileFailuresPrintTheKernelNameAndLogAndExitOne) {
  // A define that breaks every translation unit (extern "C" loses its keyword).
  const fs::path cache = fresh_dir();
  const CliResult result =
      run_cli(kSmallBuild +
              " --compile-only --filter \"c.mask == 'none'\" --nvrtc-option=-Dextern= "
              "--cache-dir " +
              cache.string());
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_GT(count_of(result.output, "failures"), 0) << result.output;
  EXPECT_TRUE(std::regex_search(
      result.output, std::regex("kernel fwd\\.sm80\\.bf16\\.\\S+ \\(symbol \\S+\\) failed")))
      << result.output;
  EXPECT_NE(result.output.find("compiler log:"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("error: expected a declaration"), std::string::npos);
  EXPECT_NE(result.output.find("failed to build"), std::string::npos);
  EXPECT_EQ(files_in(cache), 0u) << "failed compiles are not cached";
}

TEST(CliBuild, LoadingWithoutAGpuAsksForCompileOnly) {
  if (jit::gpu_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is present";
  const CliResult result = run_cli(kSmallBuild + " --cache-dir " + fresh_dir().string());
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("needs a GPU"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--compile-only"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("result:"), std::string::npos) << "nothing was compiled";
}

TEST(CliBuild, BadInputExitsTwo) {
  const std::string cache = " --cache-dir " + fresh_dir().string();
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {"build no_such_config --compile-only", "unknown sweep config 'no_such_config'"},
      {"build fwd --compile-only --arch sm70", "sm70"},
      {"build fwd --compile-only --profile nope", "nope"},
      {"build fwd --compile-only --filter \"c.hdim_q ==\"", "column 12"},
      {"build fwd --compile-only --filter-file /no/such/file", "/no/such/file"},
      {"build fwd --compile-only --workers -1", "--workers -1"},
      {"build fwd --compile-only --bogus", "--bogus"},
      {"build", "config is required"},
  };
  for (const auto& c : cases) {
    const CliResult result = run_cli(c.flags + cache);
    EXPECT_EQ(result.exit_code, 2) << c.flags << "\n" << result.output;
    EXPECT_NE(result.output.find(c.message), std::string::npos) << c.flags << "\n" << result.output;
    EXPECT_EQ(result.output.find("result:"), std::string::npos) << c.flags;
  }
}

}  // namespace
}  // namespace tilefmha
