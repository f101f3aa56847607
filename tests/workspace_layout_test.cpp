// The plan workspace's regions (runtime::workspace_layout): host index arrays, split partials and
// the stand-in K/V of a forward without keys each get their own 256-byte-aligned region, sized
// for the problem, and a problem that needs none of them gets no workspace.
#include <gtest/gtest.h>

#include "runtime/stage_runner.hpp"

namespace tilefmha::runtime {
namespace {

Problem forward(int64_t batch, int64_t seqlen_q, int64_t seqlen_k) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(batch, 8, 2, seqlen_q, seqlen_k, 128, 64);
  return builder.peek();
}

bool aligned(int64_t offset) {
  return offset >= 0 && offset % 256 == 0;
}

TEST(WorkspaceLayout, AProblemWithKeysAndNoIndexArraysNeedsNone) {
  const WorkspaceLayout layout = workspace_layout(forward(2, 64, 64), 1);
  EXPECT_EQ(layout.bytes, 0);
  EXPECT_EQ(layout.empty_kv, -1);
}

TEST(WorkspaceLayout, NoKeysGetStandInRowsForEverySequence) {
  const WorkspaceLayout layout = workspace_layout(forward(3, 64, 0), 1);
  ASSERT_TRUE(aligned(layout.empty_kv));
  // One token per sequence: 3 x nhead_k 2 x the wider head dim 128 x 2 bytes.
  EXPECT_GE(layout.bytes, layout.empty_kv + 3 * 2 * 128 * 2);
}

TEST(WorkspaceLayout, RegionsDoNotOverlap) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(1, 8, 2, 1, 1, 128, 128);
  builder.group({0, 1, 2}, {0, 0, 0});  // group mode, every sequence without keys
  const Problem problem = builder.peek();
  const WorkspaceLayout layout = workspace_layout(problem, 1);
  ASSERT_TRUE(aligned(layout.seqstart_q));
  ASSERT_TRUE(aligned(layout.seqstart_k));
  ASSERT_TRUE(aligned(layout.empty_kv));
  EXPECT_GE(layout.seqstart_k, layout.seqstart_q + 3 * 8);
  EXPECT_GE(layout.empty_kv, layout.seqstart_k + 3 * 8);
  EXPECT_GE(layout.bytes, layout.empty_kv + 2 * 128 * 2);  // one token in group mode
}

TEST(WorkspaceLayout, SplitPartialsFollowTheIndexArrays) {
  ProblemBuilder builder(Family::fwd);
  builder.dtype(DType::bf16).shape(2, 8, 2, 1, 4096, 128, 128);
  builder.key_lengths({4096, 100});
  const WorkspaceLayout layout = workspace_layout(builder.peek(), 4);
  ASSERT_TRUE(aligned(layout.seqlen_k));
  ASSERT_TRUE(aligned(layout.o_acc));
  ASSERT_TRUE(aligned(layout.lse_acc));
  const int64_t rows = 4 * 2 * 8 * 1;  // splits x batch x heads x seqlen_q
  EXPECT_GE(layout.o_acc, layout.seqlen_k + 2 * 8);
  EXPECT_GE(layout.lse_acc, layout.o_acc + rows * 128 * 4);
  EXPECT_GE(layout.bytes, layout.lse_acc + rows * 4);
  EXPECT_EQ(layout.empty_kv, -1);
}

}  // namespace
}  // namespace tilefmha::runtime
