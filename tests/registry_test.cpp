#include "runtime/registry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "jit/compiler.hpp"
#include "jit/module.hpp"
#include "support/gpu_availability.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using runtime::Registry;

namespace {

KernelConfig config_with_hdim(int32_t hdim, Arch arch = Arch::sm90) {
  KernelConfig c;
  c.arch = arch;
  c.hdim_q = c.hdim_v = hdim;
  return c;
}

}  // namespace

TEST(Registry, DeclareAddAndQuery) {
  Registry registry;
  EXPECT_TRUE(registry.declare(config_with_hdim(64)));
  EXPECT_FALSE(registry.declare(config_with_hdim(64)));
  EXPECT_TRUE(registry.contains(config_with_hdim(64)));
  EXPECT_FALSE(registry.is_built(config_with_hdim(64)));
  registry.add(config_with_hdim(128, Arch::sm80), {'x'});
  EXPECT_TRUE(registry.is_built(config_with_hdim(128, Arch::sm80)));
  EXPECT_EQ(registry.size(), 2u);
  EXPECT_EQ(registry.configs(Arch::sm80).size(), 1u);
  EXPECT_EQ(registry.configs().size(), 2u);
}

TEST(Registry, UnknownOrUnbuiltKernelIsANamedError) {
  Registry registry;
  registry.declare(config_with_hdim(64));
  try {
    registry.function(config_with_hdim(64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_kernel);
    EXPECT_NE(std::string(e.what()).find(config_with_hdim(64).name()), std::string::npos);
  }
  EXPECT_THROW(registry.function(config_with_hdim(96)), Error);
}

TEST(Registry, JsonRoundTrip) {
  Registry registry;
  for (int32_t hdim : {32, 64, 128, 256}) registry.declare(config_with_hdim(hdim));
  KernelConfig causal = config_with_hdim(128);
  causal.mask = MaskKind::causal;
  registry.declare(causal);
  Registry copy;
  EXPECT_EQ(copy.declare_from_json(nlohmann::json::parse(registry.to_json().dump())), 5u);
  EXPECT_EQ(copy.configs(), registry.configs());
}

TEST(Registry, BadJsonChangesNothing) {
  Registry registry;
  nlohmann::json document = {
      {"kernels",
       {{{"name", config_with_hdim(64).name()}, {"config", config_with_hdim(64)}},
        {{"name", "fwd.wrong"}, {"config", config_with_hdim(32)}}}}};
  EXPECT_THROW(registry.declare_from_json(document), Error);
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_THROW(registry.declare_from_json(nlohmann::json::array()), Error);
}

TEST(Registry, ConcurrentDeclarationsAreAllKept) {
  Registry registry;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&registry, t] {
      for (int32_t i = 0; i < 200; ++i) {
        registry.declare(config_with_hdim(8 * (t * 200 + i + 1)));
        registry.add(config_with_hdim(8 * (t * 200 + i + 1)), {'c'});
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(registry.size(), 800u);
}

namespace {

using namespace std::chrono_literals;

// Starts `count` threads running body(thread_index) together, and joins them.
template <class Body>
void run_together(int count, Body body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t)
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < count) std::this_thread::yield();
      body(t);
    });
  for (auto& thread : threads) thread.join();
}

}  // namespace

TEST(RegistryEnsureBuilt, ConcurrentCallersBuildEachKernelOnce) {
  Registry registry;
  constexpr int kernels = 5, threads = 8;
  std::array<std::atomic<int>, kernels> builds{};
  run_together(threads, [&](int t) {
    for (int i = 0; i < kernels; ++i) {
      const int k = (i + t) % kernels;  // threads start on different kernels
      registry.ensure_built(config_with_hdim(32 * (k + 1)), [&builds, k] {
        ++builds[k];
        std::this_thread::sleep_for(30ms);  // long enough for the others to pile up
        return std::vector<char>{'c', static_cast<char>('0' + k)};
      });
    }
  });
  for (int k = 0; k < kernels; ++k) {
    EXPECT_EQ(builds[k].load(), 1) << "kernel " << k;
    EXPECT_TRUE(registry.is_built(config_with_hdim(32 * (k + 1))));
    EXPECT_EQ(registry.cubin(config_with_hdim(32 * (k + 1))),
              (std::vector<char>{'c', static_cast<char>('0' + k)}));
  }
  EXPECT_EQ(registry.size(), static_cast<size_t>(kernels));
}

// If ensure_built held one lock across builds, the second build could not start while the
// first waits for it, and the first would time out.
TEST(RegistryEnsureBuilt, DifferentKernelsBuildAtTheSameTime) {
  Registry registry;
  std::mutex mutex;
  std::condition_variable changed;
  bool second_started = false;
  bool first_saw_second = false;
  std::thread first([&] {
    registry.ensure_built(config_with_hdim(64), [&] {
      std::unique_lock lock(mutex);
      first_saw_second = changed.wait_for(lock, 10s, [&] { return second_started; });
      return std::vector<char>{'a'};
    });
  });
  std::thread second([&] {
    registry.ensure_built(config_with_hdim(128), [&] {
      {
        std::lock_guard lock(mutex);
        second_started = true;
      }
      changed.notify_all();
      return std::vector<char>{'b'};
    });
  });
  first.join();
  second.join();
  EXPECT_TRUE(first_saw_second);
  EXPECT_TRUE(registry.is_built(config_with_hdim(64)));
  EXPECT_TRUE(registry.is_built(config_with_hdim(128)));
}

TEST(RegistryEnsureBuilt, AFailedBuildReachesEveryWaiterThenARetryBuilds) {
  Registry registry;
  const KernelConfig kernel = config_with_hdim(96);
  constexpr int threads = 8;
  std::atomic<int> builds{0}, arrived{0};
  std::mutex mutex;
  std::vector<std::string> errors;
  run_together(threads, [&](int) {
    ++arrived;
    try {
      registry.ensure_built(kernel, [&]() -> std::vector<char> {
        ++builds;
        // Fail only once every caller has arrived and had time to join this build.
        while (arrived.load() < threads) std::this_thread::yield();
        std::this_thread::sleep_for(200ms);
        throw Error(ErrorKind::compile, "kernel " + kernel.name() + " does not compile");
      });
      std::lock_guard lock(mutex);
      errors.push_back("no error");
    } catch (const Error& error) {
      std::lock_guard lock(mutex);
      errors.push_back(std::to_string(static_cast<int>(error.kind())) + ": " + error.what());
    }
  });
  EXPECT_EQ(builds.load(), 1);
  ASSERT_EQ(errors.size(), static_cast<size_t>(threads));
  for (const std::string& error : errors) {
    EXPECT_EQ(error, errors.front());
    EXPECT_NE(error.find("does not compile"), std::string::npos) << error;
  }
  // Nothing registered, not even a declaration.
  EXPECT_FALSE(registry.contains(kernel));
  EXPECT_FALSE(registry.is_built(kernel));

  registry.ensure_built(kernel, [&] {
    ++builds;
    return std::vector<char>{'o', 'k'};
  });
  EXPECT_EQ(builds.load(), 2);
  EXPECT_TRUE(registry.is_built(kernel));
  EXPECT_EQ(registry.cubin(kernel), (std::vector<char>{'o', 'k'}));
}

TEST(RegistryEnsureBuilt, AnEmptyCubinIsAnErrorAndNothingIsBuilt) {
  Registry registry;
  registry.declare(config_with_hdim(64));
  try {
    registry.ensure_built(config_with_hdim(64), [] { return std::vector<char>{}; });
    FAIL() << "an empty cubin was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(error.what()).find(config_with_hdim(64).name()), std::string::npos);
  }
  EXPECT_TRUE(registry.contains(config_with_hdim(64)));  // the declaration stays
  EXPECT_FALSE(registry.is_built(config_with_hdim(64)));
}

TEST(RegistryEnsureBuilt, AKernelAlreadyBuiltIsNotBuiltAgain) {
  Registry registry;
  registry.add(config_with_hdim(64), {'x'});
  int builds = 0;
  const auto build = [&builds] {
    ++builds;
    return std::vector<char>{'y'};
  };
  registry.ensure_built(config_with_hdim(64), build);
  EXPECT_EQ(builds, 0);
  EXPECT_EQ(registry.cubin(config_with_hdim(64)), std::vector<char>{'x'});

  registry.declare(config_with_hdim(128));  // declared only: built on first use
  registry.ensure_built(config_with_hdim(128), build);
  registry.ensure_built(config_with_hdim(128), build);
  EXPECT_EQ(builds, 1);
  EXPECT_TRUE(registry.is_built(config_with_hdim(128)));
}

TEST(Registry, AddAgainKeepsTheKernelBuiltWithTheNewestCubin) {
  Registry registry;
  registry.add(config_with_hdim(64), {'o', 'l', 'd'});
  registry.add(config_with_hdim(64), {'n', 'e', 'w'});
  EXPECT_TRUE(registry.is_built(config_with_hdim(64)));
  EXPECT_EQ(registry.cubin(config_with_hdim(64)), (std::vector<char>{'n', 'e', 'w'}));
  registry.add(config_with_hdim(64), {'n', 'e', 'w'});
  EXPECT_EQ(registry.cubin(config_with_hdim(64)), (std::vector<char>{'n', 'e', 'w'}));
  // No module was ever loaded (that needs a GPU), so none was retired.
  EXPECT_EQ(registry.retired_module_count(), 0u);
  EXPECT_THROW(registry.add(config_with_hdim(64), {}), Error);
  EXPECT_EQ(registry.cubin(config_with_hdim(64)), (std::vector<char>{'n', 'e', 'w'}));
  EXPECT_THROW(registry.cubin(config_with_hdim(96)), Error);
}

// The retirement itself: a function handed out before add() replaced the cubin still launches.
// Needs a GPU and NVRTC; skipped (reported as skipped) elsewhere.
TEST(Registry, ReplacingALoadedCubinKeepsEarlierFunctionsValid) {
  if (const std::string why = tilefmha::testing::gpu_skip_reason(); !why.empty())
    GTEST_SKIP() << why;
  jit::GpuContext context;
  const KernelConfig kernel = config_with_hdim(64, Arch::sm80);
  const auto cubin_writing = [&](int value) {
    jit::CompileOptions options;
    options.arch = "sm_" + std::to_string(context.compute_capability());
    if (options.arch == "sm_90") options.arch = "sm_90a";
    const std::string source = "extern \"C\" __global__ void " + kernel.symbol() +
                               "(int* out) { *out = " + std::to_string(value) + "; }\n";
    return jit::compile_kernel(kernel.symbol(), source, options).cubin;
  };
  const auto run = [](jit::CUfunction function) {
    jit::DeviceBuffer out(sizeof(int));
    out.fill_bytes(0);
    jit::CUdeviceptr address = out.address();
    void* arguments[] = {&address};
    jit::launch_kernel(function, jit::LaunchShape{}, arguments);
    int value = 0;
    out.copy_to_host(std::as_writable_bytes(std::span<int>(&value, 1)));
    return value;
  };

  Registry registry;
  registry.add(kernel, cubin_writing(1));
  const jit::CUfunction first = registry.function(kernel);
  EXPECT_EQ(run(first), 1);
  registry.add(kernel, registry.cubin(kernel));  // identical: a no-op
  EXPECT_EQ(registry.retired_module_count(), 0u);
  EXPECT_EQ(registry.function(kernel), first);

  registry.add(kernel, cubin_writing(2));
  EXPECT_EQ(registry.retired_module_count(), 1u);
  const jit::CUfunction second = registry.function(kernel);
  EXPECT_NE(second, first);
  EXPECT_EQ(run(second), 2);
  EXPECT_EQ(run(first), 1);  // its module was retired, not unloaded
}
