#include "tilefmha/kernel_set.hpp"

#include <gtest/gtest.h>

#include "tilefmha/error.hpp"

using namespace tilefmha;

TILEFMHA_KERNEL_SET(hopper_decode_set, "fwd.sm90.bf16.batch.sm90_ws.hq128.hv128.*",
                    "fwd.sm90.fp16.group.sm80_mma.hq64.hv64.*.mask-causal");
TILEFMHA_KERNEL_SET(typo_set, "fwd.sm90.bf16.batch.sm90_ws.hq128.hv128.*", "fwd.sm99.*");

TEST(KernelSet, WildcardsMatchCanonicalNames) {
  EXPECT_TRUE(matches_pattern("fwd.*", "fwd.sm90.bf16"));
  EXPECT_TRUE(matches_pattern("*.mask-causal", "fwd.sm90.bf16.mask-causal"));
  EXPECT_TRUE(matches_pattern("fwd.sm?0.*", "fwd.sm80.x"));
  EXPECT_TRUE(matches_pattern("*", ""));
  EXPECT_TRUE(matches_pattern("a*b*c", "aXXbYYbc"));
  EXPECT_FALSE(matches_pattern("fwd.*", "bwd_dq_dk_dv.sm90"));
  EXPECT_FALSE(matches_pattern("*.mask-causal", "fwd.mask-causal.lse-1"));
  EXPECT_FALSE(matches_pattern("fwd.sm?0", "fwd.sm100"));
}

TEST(KernelSet, ResolvesToExactlyTheMatchingKernels) {
  const auto configs = hopper_decode_set().resolve(Arch::sm90);
  ASSERT_FALSE(configs.empty());
  bool saw_hopper = false, saw_portable = false;
  for (const auto& config : configs) {
    const std::string name = config.name();
    const bool hopper = matches_pattern(hopper_decode_set().patterns()[0], name);
    const bool portable = matches_pattern(hopper_decode_set().patterns()[1], name);
    EXPECT_TRUE(hopper || portable) << name;
    saw_hopper = saw_hopper || hopper;
    saw_portable = saw_portable || portable;
    if (portable) EXPECT_EQ(config.mask, MaskKind::causal);
  }
  EXPECT_TRUE(saw_hopper);
  EXPECT_TRUE(saw_portable);
  // The set is built once: every call returns the same object.
  EXPECT_EQ(&hopper_decode_set(), &hopper_decode_set());
}

TEST(KernelSet, APatternMatchingNothingIsAnErrorNamingIt) {
  try {
    typo_set().resolve(Arch::sm90);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fwd.sm99.*"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("typo_set"), std::string::npos) << e.what();
  }
}
