// The automatic split count of split-KV (runtime::choose_num_splits): an explicit count wins, a
// grid that already fills the device is not split, and short decode rows are split into enough
// pieces to fill the device in one wave without giving a split fewer than kMinKeysPerSplit keys.
#include <gtest/gtest.h>

#include "runtime/heuristics.hpp"
#include "support/kernel_configs.hpp"

namespace tilefmha::runtime {
namespace {

const DeviceInfo kH100{Arch::sm90, 132, "H100"};

Problem decode(int64_t batch, int64_t nhead_q, int64_t nhead_k, int64_t seqlen_k,
               int64_t num_splits = 0) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(batch, nhead_q, nhead_k, 1, seqlen_k, 128, 128);
  builder.splits(num_splits);
  return builder.peek();
}

// The split kernel as the dispatcher launches it for `problem`.
KernelConfig split_kernel(const Problem& problem) {
  KernelConfig kernel = testing::sm90_fwd_config(DType::bf16, 128, 128, 64, 128);
  kernel.family = Family::fwd_splitkv;
  return launch_form(kernel, problem);
}

int64_t splits_for(const Problem& problem) {
  return choose_num_splits(problem, split_kernel(problem), kH100);
}

TEST(SplitCount, AnExplicitCountWins) {
  EXPECT_EQ(splits_for(decode(1, 32, 8, 8192, 3)), 3);
  EXPECT_EQ(splits_for(decode(64, 32, 8, 128, 5)), 5);
}

TEST(SplitCount, AGridThatFillsTheDeviceIsNotSplit) {
  EXPECT_EQ(splits_for(decode(64, 32, 32, 8192)), 1);
  EXPECT_EQ(splits_for(decode(128, 32, 8, 1024)), 1);
}

TEST(SplitCount, ShortDecodeRowsFillTheDeviceInOneWave) {
  for (int64_t seqlen_k : {1024, 2048, 8192, 32768, 131072}) {
    SCOPED_TRACE(seqlen_k);
    const Problem problem = decode(1, 32, 8, seqlen_k);
    const int64_t splits = splits_for(problem);
    const KernelConfig kernel = split_kernel(problem);
    const int64_t ctas = attention_tiles(kernel, problem) * splits;
    EXPECT_GE(splits, 4);
    EXPECT_LE(ctas, resident_ctas(kernel, kH100));
    EXPECT_GE(seqlen_k / splits, kMinKeysPerSplit);
    // At least half the slots busy: a split count that leaves most SMs idle is a bug.
    EXPECT_GE(2 * ctas,
              std::min<int64_t>(resident_ctas(kernel, kH100),
                                attention_tiles(kernel, problem) * (seqlen_k / kMinKeysPerSplit)));
  }
}

TEST(SplitCount, KeysTooFewForTwoSplitsStayInOnePass) {
  EXPECT_EQ(splits_for(decode(1, 32, 8, kMinKeysPerSplit)), 1);
}

}  // namespace
}  // namespace tilefmha::runtime
