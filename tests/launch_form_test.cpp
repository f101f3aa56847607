// The launch form the dispatcher derives for a Hopper forward kernel (runtime::launch_form):
// short query rows pack their GQA group, and packed decode tiles take the persistent grid only
// where one CTA holds an SM and the tiles are short; longer rows keep the plain persistent rule.
#include <gtest/gtest.h>

#include "codegen/fwd_sm90.hpp"
#include "runtime/heuristics.hpp"
#include "support/kernel_configs.hpp"

namespace tilefmha::runtime {
namespace {

Problem decode(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_k, int64_t hdim) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(batch, nhead_q, nhead_k, 1, seqlen_k, hdim, hdim);
  return builder.peek();
}

// The tiles the dispatcher picks for decode: 128 x 128 at hdim 128, 64 x 128 at hdim 64.
KernelConfig forward(int hdim) {
  return testing::sm90_fwd_config(DType::bf16, hdim, hdim, hdim == 64 ? 64 : 128, 128);
}

TEST(LaunchForm, ShortPackedDecodeOnOneCtaPerSmRunsPersistently) {
  const KernelConfig kernel = launch_form(forward(128), decode(128, 32, 8, 1024, 128));
  EXPECT_TRUE(kernel.pack_gqa);
  EXPECT_TRUE(kernel.persistent);
}

TEST(LaunchForm, LongPackedDecodeKeepsOneCtaPerTile) {
  const KernelConfig kernel = launch_form(forward(128), decode(128, 32, 8, 8192, 128));
  EXPECT_TRUE(kernel.pack_gqa);
  EXPECT_FALSE(kernel.persistent);
}

TEST(LaunchForm, PackedDecodeWithTwoCtasPerSmKeepsOneCtaPerTile) {
  const KernelConfig kernel = launch_form(forward(64), decode(128, 32, 8, 1024, 64));
  ASSERT_GT(codegen::sm90_ctas_per_sm(kernel), 1);
  EXPECT_TRUE(kernel.pack_gqa);
  EXPECT_FALSE(kernel.persistent);
}

TEST(LaunchForm, SplitKernelsNeverRunPersistently) {
  KernelConfig kernel = forward(128);
  kernel.family = Family::fwd_splitkv;
  kernel = launch_form(kernel, decode(128, 32, 8, 1024, 128));
  EXPECT_TRUE(kernel.pack_gqa);
  EXPECT_FALSE(kernel.persistent);
}

TEST(LaunchForm, PrefillRowsAreNotPackedAndPersistAsBefore) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(2, 32, 8, 4096, 4096, 128, 128);
  const KernelConfig kernel = launch_form(forward(128), builder.peek());
  EXPECT_FALSE(kernel.pack_gqa);
  EXPECT_TRUE(kernel.persistent);
}

}  // namespace
}  // namespace tilefmha::runtime
