// The automatic split count of split-KV (runtime::choose_num_splits): an explicit count wins, a
// grid that already fills the device is not split, and short decode rows are split into enough
// pieces to fill the SMs in one wave without giving a split fewer than kMinKeysPerSplit keys,
// none of them empty.
#include <gtest/gtest.h>

#include <vector>

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

// A split kernel merges its splits in a cluster where it is sm90_ws reading pages by TMA, the
// count fits Hopper's largest (non-portable) cluster (2..16) and the splits are short; the
// clusters must also run in one wave.
TEST(SplitCount, SplitsMergeInAClusterOfTwoToSixteen) {
  const Problem problem = decode(1, 32, 8, 1024);
  const KernelConfig kernel = split_kernel(problem);
  EXPECT_TRUE(merges_splits_in_cluster(problem, kernel, 2));
  EXPECT_TRUE(merges_splits_in_cluster(problem, kernel, 8));
  EXPECT_TRUE(merges_splits_in_cluster(problem, kernel, 16));
  EXPECT_FALSE(merges_splits_in_cluster(problem, kernel, 1));
  EXPECT_FALSE(merges_splits_in_cluster(problem, kernel, 17));
  KernelConfig portable = kernel;
  portable.pipeline = Pipeline::sm80_mma;
  EXPECT_FALSE(merges_splits_in_cluster(problem, portable, 4));
  Problem gathered = problem;  // pages under 8 keys run the gather entry
  gathered.paged.table = PageTableKind::vllm_block_table;
  gathered.paged.page_size = 4;
  EXPECT_FALSE(merges_splits_in_cluster(gathered, kernel, 4));
  gathered.paged.page_size = 16;
  EXPECT_TRUE(merges_splits_in_cluster(gathered, kernel, 4));
  // Splits longer than kClusterMergeMaxChunkKeys keep the combine.
  EXPECT_TRUE(merges_splits_in_cluster(decode(1, 32, 8, 4096), kernel, 8));
  EXPECT_FALSE(merges_splits_in_cluster(decode(1, 32, 8, 4096), kernel, 4));
}

TEST(SplitCount, MergingClustersRunInOneWave) {
  EXPECT_TRUE(clusters_run_in_one_wave(16, 8, 16, 132, 1));
  EXPECT_FALSE(clusters_run_in_one_wave(17, 8, 16, 132, 1));
  EXPECT_FALSE(clusters_run_in_one_wave(1, 8, 0, 132, 1));
  // Unknown capacity (no GPU): half the SMs' worth of CTAs.
  EXPECT_TRUE(clusters_run_in_one_wave(8, 8, -1, 132, 1));
  EXPECT_FALSE(clusters_run_in_one_wave(9, 8, -1, 132, 1));
  EXPECT_TRUE(clusters_run_in_one_wave(16, 8, -1, 132, 2));
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
    EXPECT_LE(ctas, kH100.sm_count);  // one wave, one CTA per SM
    EXPECT_GE(seqlen_k / splits, kMinKeysPerSplit);
    // At least 40% of the CTAs the SMs and the keys allow: a count that leaves most SMs idle is
    // a bug.
    const int64_t most = std::min<int64_t>(
        kH100.sm_count, attention_tiles(kernel, problem) * (seqlen_k / kMinKeysPerSplit));
    EXPECT_GE(5 * ctas, 2 * most);
  }
}

// hdim-64 GQA decode (32/8 heads, 8k keys) and its split kernel, the 64-row tile that runs two
// CTAs per SM.
Problem decode_d64(int64_t batch) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(batch, 32, 8, 1, 8192, 64, 64);
  return builder.peek();
}

KernelConfig split_kernel_d64(const Problem& problem) {
  KernelConfig kernel = testing::sm90_fwd_config(DType::bf16, 64, 64, 64, 128);
  kernel.family = Family::fwd_splitkv;
  return launch_form(kernel, problem);
}

TEST(SplitCount, TwoCtasPerSmDoNotDoubleTheSplits) {
  // Short splits still aim at one CTA per SM.
  const Problem problem = decode_d64(1);
  const KernelConfig kernel = split_kernel_d64(problem);
  ASSERT_EQ(resident_ctas(kernel, kH100), 2 * kH100.sm_count);
  const int64_t ctas = attention_tiles(kernel, problem) * choose_num_splits(problem, kernel, kH100);
  EXPECT_LE(ctas, kH100.sm_count);
  EXPECT_GT(2 * ctas, kH100.sm_count);
}

// Long splits (16+ blocks) count both CTA slots of an SM: b=8 hdim-64 GQA decode at 8k keys
// (64 tiles) takes 4 splits of 2k keys (256 CTAs on 264 slots), not 2 of 4k.
TEST(SplitCount, LongSplitsCountEveryResidentSlot) {
  const Problem problem = decode_d64(8);
  const KernelConfig kernel = split_kernel_d64(problem);
  ASSERT_EQ(resident_ctas(kernel, kH100), 2 * kH100.sm_count);
  EXPECT_EQ(choose_num_splits(problem, kernel, kH100), 4);
}

// Splits are whole granules of keys, so a count can leave its last splits empty (15 splits of
// 8k keys: 13 chunks of 640) while another one wave of CTAs gives every CTA fewer keys (16
// chunks of 512). The count chosen gives each split keys, and its CTAs the fewest keys any
// one-wave count gives them.
TEST(SplitCount, EverySplitGetsKeysAndTheLongestChunkIsAsShortAsOneWaveAllows) {
  for (int64_t seqlen_k : {1024, 8192, 32768}) {
    SCOPED_TRACE(seqlen_k);
    const Problem problem = decode(1, 32, 8, seqlen_k);
    const int64_t tiles = attention_tiles(split_kernel(problem), problem);
    const int64_t splits = splits_for(problem);
    const int64_t chunk = splitkv_chunk(seqlen_k, splits);
    EXPECT_EQ((seqlen_k + chunk - 1) / chunk, splits);
    for (int64_t other = 1; tiles * other <= kH100.sm_count; ++other)
      EXPECT_LE(chunk, splitkv_chunk(seqlen_k, other)) << other << " splits";
  }
}

// Few tiles (one or two KV heads at b=1) leave room for many one-block splits or half as many
// two-block ones; the combine's batches of 16 splits tip it to the latter (the model's one
// measured trade, kCombineBatchBlocks), while counts the combine merges in one batch are as before.
TEST(SplitCount, TheCombineWeighsAgainstManyOneBlockSplits) {
  EXPECT_EQ(splits_for(decode(1, 12, 2, 8192)), 32);   // not 64 splits of one block
  EXPECT_EQ(splits_for(decode(1, 32, 1, 32768)), 64);  // not 128 of two
  EXPECT_EQ(splits_for(decode(1, 12, 2, 4096)), 32);   // 16 of two blocks measured even
  EXPECT_EQ(splits_for(decode(1, 32, 8, 8192)), 16);   // 8 tiles: one batch either way
  // Without the combine's batches the model takes the one-block splits.
  const int64_t tiles =
      attention_tiles(split_kernel(decode(1, 12, 2, 8192)), decode(1, 12, 2, 8192));
  EXPECT_LT(merged_split_cost(tiles, 8192, 64, kH100.sm_count),
            merged_split_cost(tiles, 8192, 32, kH100.sm_count));
  EXPECT_DOUBLE_EQ(split_cost(tiles, 8192, 32, kH100.sm_count),
                   merged_split_cost(tiles, 8192, 32, kH100.sm_count) + 2 * kCombineBatchBlocks);
}

std::vector<int64_t> merged_alternatives_for(const Problem& problem) {
  return merged_split_alternatives(problem, split_kernel(problem), kH100, splits_for(problem));
}

// Where the chosen splits need the combine, half as many merged in clusters of up to 8 replace
// them while those stay short (two blocks); longer splits, larger clusters and fixed counts
// keep the combine.
TEST(SplitCount, FewerSplitsMergedReplaceTheCombineOnlyWhileShort) {
  EXPECT_EQ(splits_for(decode(1, 32, 8, 2048)), 16);
  EXPECT_EQ(merged_alternatives_for(decode(1, 32, 8, 2048)), std::vector<int64_t>{8});
  EXPECT_TRUE(merged_alternatives_for(decode(1, 32, 8, 4096)).empty());
  EXPECT_TRUE(merged_alternatives_for(decode(1, 32, 8, 8192)).empty());
  EXPECT_TRUE(merged_alternatives_for(decode(1, 12, 2, 8192)).empty());  // not 16 merged
  EXPECT_TRUE(merged_alternatives_for(decode(1, 32, 8, 2048, 16)).empty());
  EXPECT_TRUE(merged_alternatives_for(decode(8, 28, 4, 1024)).empty());  // not 3 of 384 keys
  EXPECT_EQ(merged_alternatives_for(decode(8, 32, 1, 2048)), std::vector<int64_t>{8});
}

TEST(SplitCount, KeysTooFewForTwoSplitsStayInOnePass) {
  EXPECT_EQ(splits_for(decode(1, 32, 8, kMinKeysPerSplit)), 1);
}

}  // namespace
}  // namespace tilefmha::runtime
