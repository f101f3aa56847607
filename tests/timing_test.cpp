// Timing statistics and host-side timing (runtime/timing.hpp); the GPU timer's behaviour
// without a GPU. GPU timing itself is covered by bench_gpu_test.
#include "runtime/timing.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "jit/cuda_driver.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

TEST(SampleStats, OddCountTakesTheMiddleOfTheSortedSamples) {
  const SampleStats stats = summarize({5.0, 1.0, 4.0, 2.0, 3.0});
  EXPECT_DOUBLE_EQ(stats.median, 3.0);
  EXPECT_DOUBLE_EQ(stats.min, 1.0);
  EXPECT_DOUBLE_EQ(stats.max, 5.0);
  EXPECT_DOUBLE_EQ(stats.mean, 3.0);
}

TEST(SampleStats, EvenCountAveragesTheTwoMiddleSamples) {
  const SampleStats stats = summarize({10.0, 1.0, 7.0, 2.0});
  EXPECT_DOUBLE_EQ(stats.median, 4.5);  // (2 + 7) / 2
  EXPECT_DOUBLE_EQ(stats.min, 1.0);
  EXPECT_DOUBLE_EQ(stats.max, 10.0);
  EXPECT_DOUBLE_EQ(stats.mean, 5.0);
}

TEST(SampleStats, KeepsTheSamplesInMeasurementOrder) {
  const std::vector<double> samples{3.0, 1.0, 2.0};
  EXPECT_EQ(summarize(samples).samples, samples);
}

TEST(SampleStats, OneSampleIsEveryStatistic) {
  const SampleStats stats = summarize({0.25});
  EXPECT_DOUBLE_EQ(stats.median, 0.25);
  EXPECT_DOUBLE_EQ(stats.min, 0.25);
  EXPECT_DOUBLE_EQ(stats.max, 0.25);
  EXPECT_DOUBLE_EQ(stats.mean, 0.25);
}

TEST(SampleStats, MedianIgnoresOneOutlier) {
  // A single slow repeat (a clock change, a context switch) must not move the median.
  const SampleStats stats = summarize({1.0, 1.0, 1.0, 1.0, 50.0});
  EXPECT_DOUBLE_EQ(stats.median, 1.0);
  EXPECT_DOUBLE_EQ(stats.max, 50.0);
  EXPECT_GT(stats.mean, stats.median);
}

TEST(SampleStats, EmptyAndNanAreErrors) {
  EXPECT_THROW(summarize({}), Error);
  try {
    summarize({1.0, std::numeric_limits<double>::quiet_NaN()});
    FAIL() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("sample 1"), std::string::npos) << e.what();
  }
}

TEST(TimingOptions, RejectsNegativeWarmupAndNoRepeats) {
  EXPECT_NO_THROW(check_timing_options({0, 1, false}));
  try {
    check_timing_options({-1, 5, false});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warmup = -1"), std::string::npos) << e.what();
  }
  try {
    check_timing_options({3, 0, false});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repeat = 0"), std::string::npos) << e.what();
  }
}

TEST(HostTiming, CallsWarmupPlusRepeatTimesAndMeasuresEach) {
  int calls = 0;
  const SampleStats stats = time_on_host([&] { ++calls; }, 4, 7);
  EXPECT_EQ(calls, 11);
  EXPECT_EQ(stats.samples.size(), 7u);
  for (double us : stats.samples) EXPECT_GE(us, 0.0);
}

TEST(HostTiming, ReportsMicrosecondsOfTheTimedCalls) {
  // The warm-up sleeps far longer than the timed calls: it must not be counted.
  int calls = 0;
  const SampleStats stats = time_on_host(
      [&] {
        const auto pause =
            calls++ == 0 ? std::chrono::milliseconds(60) : std::chrono::milliseconds(2);
        std::this_thread::sleep_for(pause);
      },
      1, 5);
  EXPECT_GE(stats.min, 2000.0);      // at least the 2 ms sleep, in microseconds
  EXPECT_LT(stats.median, 50000.0);  // the 60 ms warm-up is not among the samples
}

TEST(HostTiming, RejectsBadCounts) {
  EXPECT_THROW(time_on_host([] {}, 0, 0), Error);
  EXPECT_THROW(time_on_host([] {}, -2, 3), Error);
}

TEST(GpuTiming, WithoutAGpuFailsBeforeLaunching) {
  const std::string reason = jit::gpu_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a GPU is present; bench_gpu_test covers GPU timing";
  bool launched = false;
  try {
    time_on_gpu([&](jit::CUstream) { launched = true; }, {0, 3, false}, nullptr);
    FAIL() << "timed without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime) << e.what();
  }
  EXPECT_FALSE(launched);
}

}  // namespace
}  // namespace tilefmha::runtime
