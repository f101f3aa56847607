// The GPU kernels' 32-bit limits are refused when planning, at their exact boundaries: sequence
// lengths below 2^30, sm90 group-mode token counts below 2^31 (int32 TMA coordinates) and the
// sm90 scheduler's tile count at most 2^30. Planning reads shapes only, so these problems are
// views of enormous sizes over a fake device address that nothing ever reads.
#include "templates/gpu_limits.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "codegen/fwd_sm90.hpp"
#include "runtime/candidates.hpp"
#include "runtime/dispatcher.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::runtime;

namespace {

void* const kFake = reinterpret_cast<void*>(uintptr_t{1} << 20);
constexpr int64_t k2To30 = int64_t{1} << 30;
constexpr int64_t k2To31 = int64_t{1} << 31;

TensorView device_rows(int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return bshd(kFake, DType::bf16, batch, seq, heads, dim, MemorySpace::device);
}

Problem batch_problem(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_k,
                      bool causal = false) {
  ProblemBuilder b(Family::fwd);
  b.dtype(DType::bf16).shape(batch, heads, heads, seqlen_q, seqlen_k, 128, 128);
  b.q(device_rows(batch, seqlen_q, heads, 128)).o(device_rows(batch, seqlen_q, heads, 128));
  b.k(device_rows(batch, seqlen_k, heads, 128)).v(device_rows(batch, seqlen_k, heads, 128));
  if (causal) b.causal();
  return b.build();
}

// An sm90 planner over the default forward candidates (sm90_ws, sm80_mma, simt_f32).
struct Planner {
  static DispatcherOptions options() {
    DispatcherOptions options;
    options.candidates = default_candidates(Arch::sm90, {Family::fwd});
    return options;
  }
  Registry registry;
  Dispatcher dispatcher{registry, {Arch::sm90, 132, "test"}, options()};
};

KernelConfig sm90_kernel(MaskKind mask) {
  KernelConfig c;
  c.arch = Arch::sm90;
  c.pipeline = Pipeline::sm90_ws;
  c.mask = mask;
  c.block_m = 128;
  c.block_n = 128;
  c.warps = 12;
  return c;
}

TEST(GpuLimits, SequenceLengthsStayBelowTwoToThe30) {
  EXPECT_FALSE(templates::check_sequence_lengths(batch_problem(1, 1, k2To30 - 1, 8)));
  EXPECT_FALSE(templates::check_sequence_lengths(batch_problem(1, 1, 8, k2To30 - 1)));
  const auto long_q = templates::check_sequence_lengths(batch_problem(1, 1, k2To30, 8));
  ASSERT_TRUE(long_q);
  EXPECT_EQ(long_q->field, "seqlen_q");
  EXPECT_EQ(long_q->text.rfind("seqlen_q = 1073741824: ", 0), 0u) << long_q->text;
  const auto long_k = templates::check_sequence_lengths(batch_problem(1, 1, 8, k2To30));
  ASSERT_TRUE(long_k);
  EXPECT_EQ(long_k->field, "seqlen_k");
}

TEST(GpuLimits, PlanningRefusesLongSequencesOnEveryKernelNamingTheField) {
  Planner planner;
  const auto fits = planner.dispatcher.explain(batch_problem(1, 1, 8, k2To30 - 1));
  ASSERT_FALSE(fits.empty());
  EXPECT_EQ(fits.front().rejection, "");
  const auto refused = planner.dispatcher.explain(batch_problem(1, 1, 8, k2To30));
  ASSERT_FALSE(refused.empty());
  for (const CandidateVerdict& verdict : refused) {
    EXPECT_NE(verdict.rejection, "") << verdict.kernel.name();
  }
  // The closest candidates (those matching every trait) name the length, and so does the
  // "no kernel" error of planning (which fails before compiling anything).
  EXPECT_EQ(refused.front().rejection_field, "seqlen_k") << refused.front().rejection;
  try {
    planner.dispatcher.plan(batch_problem(1, 1, 8, k2To30));
    FAIL() << "planned a sequence of 2^30 keys";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_kernel);
    EXPECT_NE(std::string(e.what()).find("seqlen_k = 1073741824: the GPU kernels index"),
              std::string::npos)
        << e.what();
  }
}

TEST(GpuLimits, Sm90SchedulerTilesAtMostTwoToThe30) {
  // 2^20 query blocks of 128 rows x 1024 heads x 1 sequence = 2^30 tiles exactly.
  const int64_t rows = int64_t{128} << 20;
  const KernelConfig plain = sm90_kernel(MaskKind::none);
  const Problem at_limit = batch_problem(1, 1024, rows, 8);
  EXPECT_EQ(codegen::sm90_scheduler_tiles(plain, at_limit, 1), k2To30);
  EXPECT_FALSE(templates::check_sm90_limits(plain, at_limit));
  // One more row adds a query block per head: over the limit.
  const Problem over = batch_problem(1, 1024, rows + 1, 8);
  const auto refused = templates::check_sm90_limits(plain, over);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->text.find("tiles exceed the sm90_ws scheduler's 2^30"), std::string::npos)
      << refused->text;
  // The same problem still plans, on the sm80 pipeline, whose grid has no such count.
  Planner planner;
  const auto verdicts = planner.dispatcher.explain(over);
  ASSERT_FALSE(verdicts.empty());
  EXPECT_EQ(verdicts.front().rejection, "");
  EXPECT_NE(verdicts.front().kernel.pipeline, Pipeline::sm90_ws);
}

TEST(GpuLimits, Sm90MaskedTilesCountInWholePairs) {
  // An odd number of query blocks rounds up to whole pairs when the mask lets tiles pair.
  const int64_t rows = int64_t{128} * ((int64_t{1} << 20) - 1);
  const Problem odd = batch_problem(1, 1024, rows, 8, true);
  EXPECT_EQ(codegen::sm90_scheduler_tiles(sm90_kernel(MaskKind::none), odd, 1), k2To30 - 1024);
  EXPECT_EQ(codegen::sm90_scheduler_tiles(sm90_kernel(MaskKind::causal), odd, 1), k2To30);
  EXPECT_FALSE(templates::check_sm90_limits(sm90_kernel(MaskKind::causal), odd));
  const Problem over = batch_problem(1, 1025, rows, 8, true);
  EXPECT_TRUE(templates::check_sm90_limits(sm90_kernel(MaskKind::causal), over));
}

TEST(GpuLimits, Sm90TileCountOverflowingInt64IsRefusedNotWrapped) {
  // The count reads only lengths, heads and batch; views this large cannot exist, so the
  // problem is assembled without them (and without validation).
  Problem huge;
  huge.batch = int64_t{1} << 20;
  huge.nhead_q = huge.nhead_k = int64_t{1} << 20;
  huge.seqlen_q = k2To30 - 1;
  EXPECT_FALSE(codegen::sm90_scheduler_tiles(sm90_kernel(MaskKind::none), huge, 1));
  const auto refused = templates::check_sm90_limits(sm90_kernel(MaskKind::none), huge);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->text.find("more than 2^63 tiles"), std::string::npos) << refused->text;
}

// Group mode: 3 sequences below 2^30 each, packed into views of 2^31 - 1 or 2^31 rows.
Problem group_problem(int64_t total) {
  const int64_t third = total / 3;
  ProblemBuilder b(Family::fwd);
  b.dtype(DType::bf16).shape(1, 1, 1, 0, 0, 64, 64);
  b.group({0, third, 2 * third, total}, {0, 8, 16, 24});
  b.q(device_rows(1, total, 1, 64)).o(device_rows(1, total, 1, 64));
  b.k(device_rows(1, 24, 1, 64)).v(device_rows(1, 24, 1, 64));
  return b.build();
}

TEST(GpuLimits, Sm90GroupModeTokensStayBelowTwoToThe31) {
  KernelConfig c = sm90_kernel(MaskKind::none);
  c.mode = Mode::group;
  c.hdim_q = c.hdim_v = 64;
  EXPECT_FALSE(templates::check_sm90_limits(c, group_problem(k2To31 - 1)));
  const auto refused = templates::check_sm90_limits(c, group_problem(k2To31));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->field, "q.shape");
  EXPECT_EQ(refused->text.rfind("q.shape[1] = 2147483648 packed tokens", 0), 0u) << refused->text;
}

}  // namespace
