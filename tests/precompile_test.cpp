// Ahead-of-time build jobs (runtime/precompile.hpp): named and generated as the dispatcher
// compiles on first use, and the launch forms it derives per problem added for sm90_ws, so that
// `tilefmha build` and tilefmha.warmup() fill the cache entries a later plan reads. Host only.
#include "runtime/precompile.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "codegen/generate.hpp"
#include "support/kernel_configs.hpp"

namespace tilefmha {
namespace {

TEST(Precompile, JobsAreNamedBySymbolWithTheTemplateSource) {
  const std::vector<KernelConfig> configs = {
      testing::sm80_fwd_config(DType::bf16, 64, 64, 64, 64, 4, 2),
      testing::sm90_fwd_config(DType::fp16, 128, 128, 128, 128)};
  const std::vector<jit::BuildJob> jobs = runtime::build_jobs(configs);
  ASSERT_EQ(jobs.size(), configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(jobs[i].name, configs[i].symbol());
    EXPECT_EQ(jobs[i].source, codegen::generate_source(configs[i]));
  }
}

// Packed tiles may run persistently too (short decode over many tiles): that is a fourth form.
TEST(Precompile, Sm90ForwardGainsItsPersistentAndPackedForms) {
  const KernelConfig plain = testing::sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  const std::vector<KernelConfig> forms = runtime::with_launch_forms(std::vector{plain});
  ASSERT_EQ(forms.size(), 4u);
  EXPECT_EQ(forms[0], plain);  // the given configs come first, unchanged
  std::set<std::string> names;
  for (const KernelConfig& form : forms) names.insert(form.name());
  EXPECT_EQ(names.size(), 4u) << "each form is a cubin of its own";
  EXPECT_TRUE(names.contains(plain.name() + ".persist-1")) << *names.rbegin();
  EXPECT_TRUE(names.contains(plain.name() + ".packgqa-1")) << *names.rbegin();
  EXPECT_TRUE(names.contains(plain.name() + ".persist-1.packgqa-1")) << *names.rbegin();
}

// The Hopper backward's launch forms are its persistent grid and, unmasked, the dQ turns the
// default mode takes where they pay (deterministic, on the staggered persistent grid); it packs
// no GQA groups.
TEST(Precompile, Sm90BackwardGainsItsPersistentAndTurnForms) {
  KernelConfig bwd = testing::sm90_bwd_config(DType::bf16, 64);
  const std::vector<KernelConfig> forms = runtime::with_launch_forms(std::vector{bwd});
  ASSERT_EQ(forms.size(), 3u);
  EXPECT_EQ(forms[0], bwd);
  EXPECT_TRUE(forms[1].persistent);
  EXPECT_FALSE(forms[1].deterministic);
  EXPECT_TRUE(forms[2].persistent);
  EXPECT_TRUE(forms[2].deterministic);
  for (const KernelConfig& form : forms) EXPECT_FALSE(form.pack_gqa);
  bwd.mask = MaskKind::causal;  // masked: the persistent form only
  EXPECT_EQ(runtime::with_launch_forms(std::vector{bwd}).size(), 2u);
}

TEST(Precompile, SplitKvGainsOnlyThePackedFormAndSm80Nothing) {
  KernelConfig split = testing::sm90_fwd_config(DType::bf16, 128, 128, 128, 128);
  split.family = Family::fwd_splitkv;
  const std::vector<KernelConfig> split_forms = runtime::with_launch_forms(std::vector{split});
  ASSERT_EQ(split_forms.size(), 2u);
  EXPECT_TRUE(split_forms[1].pack_gqa);
  EXPECT_FALSE(split_forms[1].persistent);  // split-KV runs one CTA per tile

  const KernelConfig sm80 = testing::sm80_fwd_config(DType::bf16, 64, 64, 64, 64, 4, 2);
  EXPECT_EQ(runtime::with_launch_forms(std::vector{sm80}).size(), 1u);
}

}  // namespace
}  // namespace tilefmha
