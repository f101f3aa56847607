#include <gtest/gtest.h>

#include "tilefmha/kernel_config.hpp"

using namespace tilefmha;

TEST(KernelConfig, NameRoundTrip) {
  KernelConfig c;
  c.mask = MaskKind::causal;
  c.sink_logit = true;
  c.stages = 3;
  EXPECT_EQ(KernelConfig::parse_name(c.name()), c) << c.name();
}
