#include "runtime/registry.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

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
