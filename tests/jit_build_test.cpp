// The parallel build pipeline: counts, per-job results, failures, cache reuse, load stage.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "jit/build_pipeline.hpp"
#include "support/scratch_dirs.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

namespace fs = std::filesystem;
using testing::TemporaryDirectory;

// Eight distinct small kernels: each scales by its own constant.
std::vector<BuildJob> scale_jobs(int count) {
  std::vector<BuildJob> jobs;
  for (int i = 0; i < count; ++i) {
    const std::string name = "scale_by_" + std::to_string(i);
    jobs.push_back({name, "#include \"tile/warp_reduce.h\"\nextern \"C\" __global__ void " + name +
                              "(float* data) {\n  data[threadIdx.x] = "
                              "tilefmha::tile::warp_sum(data[threadIdx.x]) * " +
                              std::to_string(i + 1) + ".0f;\n}\n"});
  }
  return jobs;
}

BuildOptions two_workers() {
  BuildOptions options;
  options.compile.arch = "sm_80";
  options.workers = 2;
  options.show_progress = false;
  return options;
}

TEST(JitBuild, EightJobsOnTwoWorkersThenAllHits) {
  const TemporaryDirectory directory("tilefmha_jit_build_test_");
  const KernelCache cache(directory.path());
  const std::vector<BuildJob> jobs = scale_jobs(8);

  const BuildReport first = build_kernels(jobs, two_workers(), &cache);
  EXPECT_EQ(first.summary.counts.total, 8);
  EXPECT_EQ(first.summary.counts.done, 8);
  EXPECT_EQ(first.summary.counts.built, 8);
  EXPECT_EQ(first.summary.counts.cache_hits, 0);
  EXPECT_EQ(first.summary.counts.failures, 0);
  EXPECT_GT(first.summary.kernels_per_second, 0);
  ASSERT_EQ(first.results.size(), 8u);
  std::set<std::vector<char>> distinct_cubins;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(first.results[i].name, jobs[i].name) << "results must follow job order";
    EXPECT_TRUE(first.results[i].ok) << first.results[i].error;
    EXPECT_EQ(first.results[i].cache, CacheOutcome::miss);
    EXPECT_GT(first.results[i].compile_seconds, 0);
    distinct_cubins.insert(first.results[i].cubin);
  }
  EXPECT_EQ(distinct_cubins.size(), 8u);
  EXPECT_TRUE(first.failure_report().empty());

  const BuildReport second = build_kernels(jobs, two_workers(), &cache);
  EXPECT_EQ(second.summary.counts.cache_hits, 8);
  EXPECT_EQ(second.summary.counts.built, 0);
  EXPECT_EQ(second.summary.counts.failures, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(second.results[i].cache, CacheOutcome::hit);
    EXPECT_EQ(second.results[i].cubin, first.results[i].cubin);
  }
}

TEST(JitBuild, FailingJobIsReportedWithNameAndLogWhileOthersSucceed) {
  std::vector<BuildJob> jobs = scale_jobs(4);
  jobs.insert(
      jobs.begin() + 2,
      {"broken_job_7", "extern \"C\" __global__ void broken(int* p) { p[0] = missing_q; }"});
  const BuildReport report = build_kernels(jobs, two_workers(), nullptr);
  EXPECT_EQ(report.summary.counts.failures, 1);
  EXPECT_EQ(report.summary.counts.built, 4);
  EXPECT_FALSE(report.results[2].ok);
  EXPECT_NE(report.results[2].error.find("broken_job_7"), std::string::npos);
  EXPECT_NE(report.results[2].error.find("missing_q"), std::string::npos);
  EXPECT_TRUE(report.results[2].cubin.empty());
  for (size_t i : {0, 1, 3, 4}) EXPECT_TRUE(report.results[i].ok);
  const std::string failures = report.failure_report();
  EXPECT_NE(failures.find("kernel 'broken_job_7' failed"), std::string::npos) << failures;
  EXPECT_NE(failures.find("compiler log"), std::string::npos) << failures;
}

TEST(JitBuild, LoadStageRunsOnTheCallingThreadOncePerSuccess) {
  std::vector<BuildJob> jobs = scale_jobs(5);
  jobs.push_back({"bad", "this is not CUDA"});
  const std::thread::id caller = std::this_thread::get_id();
  std::multiset<std::string> loaded;
  bool always_on_caller = true;
  const BuildReport report = build_kernels(jobs, two_workers(), nullptr, [&](BuildResult& result) {
    always_on_caller = always_on_caller && std::this_thread::get_id() == caller;
    EXPECT_FALSE(result.cubin.empty());
    loaded.insert(result.name);
  });
  EXPECT_TRUE(always_on_caller);
  EXPECT_EQ(loaded.size(), 5u);
  EXPECT_EQ(loaded.count("bad"), 0u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(loaded.count("scale_by_" + std::to_string(i)), 1u);
  EXPECT_EQ(report.summary.counts.failures, 1);
}

TEST(JitBuild, ThrowingLoadStageMarksOnlyThatJobFailed) {
  const std::vector<BuildJob> jobs = scale_jobs(3);
  const BuildReport report = build_kernels(jobs, two_workers(), nullptr, [](BuildResult& result) {
    if (result.name == "scale_by_1") throw Error(ErrorKind::runtime, "cuModuleLoadData failed: X");
  });
  EXPECT_EQ(report.summary.counts.failures, 1);
  EXPECT_FALSE(report.results[1].ok);
  EXPECT_NE(report.results[1].error.find("loading kernel 'scale_by_1'"), std::string::npos);
  EXPECT_NE(report.results[1].error.find("cuModuleLoadData failed"), std::string::npos);
  EXPECT_TRUE(report.results[0].ok);
  EXPECT_TRUE(report.results[2].ok);
}

TEST(JitBuild, ProgressSummaryGoesToStderr) {
  const std::vector<BuildJob> jobs = scale_jobs(2);
  BuildOptions options = two_workers();
  options.show_progress = true;
  ::testing::internal::CaptureStderr();
  build_kernels(jobs, options, nullptr);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("2 kernels in"), std::string::npos) << printed;
  EXPECT_NE(printed.find("2 built, 0 cache hits, 0 failures"), std::string::npos) << printed;
}

TEST(JitBuild, EmptyJobListAndBadWorkerCount) {
  const BuildReport empty = build_kernels({}, two_workers(), nullptr);
  EXPECT_EQ(empty.summary.counts.total, 0);
  EXPECT_TRUE(empty.results.empty());

  BuildOptions negative = two_workers();
  negative.workers = -3;
  const std::vector<BuildJob> jobs = scale_jobs(1);
  try {
    build_kernels(jobs, negative, nullptr);
    FAIL() << "negative workers accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("-3"), std::string::npos);
  }
}

}  // namespace
}  // namespace tilefmha::jit
