// The host problems `tilefmha sweep` times, without a GPU: the paged builder's page tables
// cover every key of every sequence in the kernel's table form and layout, everything else in
// the pool is NaN, key lengths are ragged; and the row validation (the CPU reference against
// the "GPU" output) passes a right answer and fails a wrong page read.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "bench/matrix.hpp"
#include "core/numeric.hpp"
#include "sweep_device_indices.hpp"
#include "sweep_problem.hpp"
#include "sweep_validate.hpp"
#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"
#include "tilefmha/validate.hpp"

namespace tilefmha {
namespace {

using cli::HostProblem;

std::vector<bench::MatrixShape> smoke_shapes(Family family) {
  std::vector<bench::MatrixShape> out;
  for (bench::MatrixShape& shape : bench::load_matrix_tier("smoke"))
    if (shape.family == family) out.push_back(std::move(shape));
  return out;
}

KernelConfig paged_kernel(const bench::MatrixShape& shape, PageTableKind table, KvLayout layout) {
  KernelConfig kernel;
  kernel.family = shape.family;
  kernel.page_table = table;
  kernel.kv_layout = layout;
  return kernel;
}

HostProblem build(const bench::MatrixShape& shape, const KernelConfig& kernel) {
  HostProblem host;
  const std::string why = cli::build_host_problem(shape, kernel, host);
  EXPECT_EQ(why, "") << shape.label();
  return host;
}

// The first and last element of the head-dim row (page, slot, head): rows are copied whole.
bool row_is_nan(const TensorView& pool, int64_t page, int64_t slot, int64_t head) {
  return std::isnan(numeric::load(pool, {page, slot, head, 0})) &&
         std::isnan(numeric::load(pool, {page, slot, head, pool.shape[3] - 1}));
}
bool row_is_finite(const TensorView& pool, int64_t page, int64_t slot, int64_t head) {
  return std::isfinite(numeric::load(pool, {page, slot, head, 0})) &&
         std::isfinite(numeric::load(pool, {page, slot, head, pool.shape[3] - 1}));
}

// Every key of every sequence has its own finite slot; every other slot of the pool is NaN in
// every head; vLLM padding entries name a page no key lives in.
void expect_pool_covers_keys(const Problem& p, const std::string& what) {
  const int64_t page_size = p.paged.page_size;
  std::set<int64_t> used;  // page * page_size + slot
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t j = 0; j < p.key_length(b); ++j) {
      const auto [page, slot] = p.page_slot(b, j);
      ASSERT_GE(page, 0) << what;
      ASSERT_LT(page, p.paged.num_pages) << what;
      ASSERT_TRUE(used.insert(page * page_size + slot).second)
          << what << ": sequence " << b << " key " << j << " shares a slot";
    }
  }
  for (int64_t page = 0; page < p.paged.num_pages; ++page) {
    for (int64_t slot = 0; slot < page_size; ++slot) {
      const bool key_lives_here = used.count(page * page_size + slot) > 0;
      for (int64_t h = 0; h < p.nhead_k; ++h) {
        for (const TensorView* pool : {&p.k, &p.v}) {
          if (key_lives_here)
            ASSERT_TRUE(row_is_finite(*pool, page, slot, h)) << what << " page " << page;
          else
            ASSERT_TRUE(row_is_nan(*pool, page, slot, h)) << what << " page " << page;
        }
      }
    }
  }
  if (p.paged.table != PageTableKind::vllm_block_table) return;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t pages = (p.key_length(b) + page_size - 1) / page_size;
    for (int64_t e = pages; e < p.paged.max_pages_per_seq; ++e) {
      const int32_t padding = p.paged.block_table[b * p.paged.max_pages_per_seq + e];
      for (int64_t slot = 0; slot < page_size; ++slot)
        ASSERT_EQ(used.count(padding * page_size + slot), 0u) << what << " padding entry";
    }
  }
}

TEST(SweepPagedProblem, PagesCoverEachSequenceAndTheRestIsNan) {
  for (Family family : {Family::fwd_pagedkv, Family::batch_prefill}) {
    const auto shapes = smoke_shapes(family);
    ASSERT_FALSE(shapes.empty()) << to_string(family);
    // Each shape in one of the four (table form, layout) pairs, in turn: every pair meets
    // every page size across the group, at a quarter of the building.
    for (size_t i = 0; i < shapes.size(); ++i) {
      const bench::MatrixShape& shape = shapes[i];
      const PageTableKind table =
          i % 2 ? PageTableKind::sglang_page_list : PageTableKind::vllm_block_table;
      const KvLayout layout = i / 2 % 2 ? KvLayout::hnd : KvLayout::nhd;
      const HostProblem host = build(shape, paged_kernel(shape, table, layout));
      const Problem& p = host.problem;
      const std::string what = shape.label() + " " + std::string(to_string(table)) + " " +
                               std::string(to_string(layout));
      ASSERT_EQ(p.family, family);
      EXPECT_EQ(p.paged.table, table) << what;
      EXPECT_EQ(p.paged.layout, layout) << what;
      EXPECT_EQ(p.paged.page_size, shape.page_size) << what;
      expect_pool_covers_keys(p, what);
    }
  }
}

TEST(SweepPagedProblem, PoolStridesFollowTheKernelsLayout) {
  const bench::MatrixShape shape = smoke_shapes(Family::fwd_pagedkv).front();
  const int64_t ps = shape.page_size, hk = shape.nhead_k, d = shape.hdim_q;
  const HostProblem nhd =
      build(shape, paged_kernel(shape, PageTableKind::vllm_block_table, KvLayout::nhd));
  const HostProblem hnd =
      build(shape, paged_kernel(shape, PageTableKind::vllm_block_table, KvLayout::hnd));
  const std::array<int64_t, kMaxRank> nhd_strides{ps * hk * d, hk * d, d, 1, 0};
  const std::array<int64_t, kMaxRank> hnd_strides{hk * ps * d, d, ps * d, 1, 0};
  EXPECT_EQ(nhd.problem.k.stride, nhd_strides);
  EXPECT_EQ(hnd.problem.k.stride, hnd_strides);
  for (const HostProblem* host : {&nhd, &hnd}) {
    const Problem& p = host->problem;
    EXPECT_EQ(p.k.shape[0], p.paged.num_pages);
    EXPECT_EQ(p.k.extent() * dtype_size(p.dtype), static_cast<int64_t>(host->k.size()));
    EXPECT_EQ(p.v.extent() * dtype_size(p.dtype), static_cast<int64_t>(host->v.size()));
    EXPECT_EQ(p.o.numel() * dtype_size(p.out_dtype), static_cast<int64_t>(host->o.size()));
  }
  // The same logical keys whatever the layout: rows of one shape compare the same data.
  for (int64_t b = 0; b < nhd.problem.batch; ++b)
    for (int64_t j : {int64_t{0}, nhd.problem.key_length(b) - 1}) {
      const auto at_nhd = nhd.problem.page_slot(b, j);
      const auto at_hnd = hnd.problem.page_slot(b, j);
      EXPECT_EQ(numeric::load(nhd.problem.k, {at_nhd.page, at_nhd.slot, hk - 1, d - 1}),
                numeric::load(hnd.problem.k, {at_hnd.page, at_hnd.slot, hk - 1, d - 1}));
    }
}

TEST(SweepPagedProblem, PagesAreScatteredAndKeyLengthsRagged) {
  for (const bench::MatrixShape& shape : smoke_shapes(Family::fwd_pagedkv)) {
    const HostProblem host =
        build(shape, paged_kernel(shape, PageTableKind::vllm_block_table, KvLayout::nhd));
    const Problem& p = host.problem;
    ASSERT_EQ(p.mode, Mode::batch);
    ASSERT_GE(p.batch, 3) << "the smoke pagedkv group has batch 4";
    std::set<int64_t> lengths;
    for (int64_t b = 0; b < p.batch; ++b) lengths.insert(p.key_length(b));
    EXPECT_EQ(*lengths.rbegin(), shape.seqlen_k) << shape.label();
    EXPECT_EQ(p.seqlen_k, shape.seqlen_k) << shape.label();
    EXPECT_LE(*lengths.begin(), 37) << shape.label() << ": a short sequence";
    EXPECT_GE(*lengths.begin(), shape.seqlen_q) << shape.label();
    EXPECT_GE(lengths.size(), 3u) << shape.label();
    // Sequence 0's pages are not the pool's first pages in order.
    const int64_t pages = (p.key_length(0) + p.paged.page_size - 1) / p.paged.page_size;
    bool in_order = true;
    for (int64_t e = 0; e < pages; ++e) in_order = in_order && p.paged.block_table[e] == e;
    EXPECT_FALSE(in_order) << shape.label();
    EXPECT_GT(p.paged.num_pages, pages) << shape.label() << ": spare pages";
  }
}

// FLOPs count exactly the visible pairs: bottom-right causal row i of a sequence with sq <= sk
// queries sees sk - sq + i + 1 keys.
TEST(SweepPagedProblem, FlopsCountVisiblePairs) {
  for (Family family : {Family::fwd_pagedkv, Family::batch_prefill})
    for (const bench::MatrixShape& shape : smoke_shapes(family)) {
      const HostProblem host = build(shape, paged_kernel(shape, shape.page_table, KvLayout::nhd));
      const Problem& p = host.problem;
      double pairs = 0;
      for (int64_t b = 0; b < p.batch; ++b) {
        const double sq = static_cast<double>(p.query_length(b));
        const double sk = static_cast<double>(p.key_length(b));
        ASSERT_LE(sq, sk) << shape.label();
        pairs += shape.mask == MaskKind::causal ? sq * sk - sq * (sq - 1) / 2 : sq * sk;
      }
      EXPECT_DOUBLE_EQ(host.flops, 2 * pairs * static_cast<double>(shape.nhead_q) *
                                       static_cast<double>(shape.hdim_q + shape.hdim_v))
          << shape.label();
      EXPECT_GT(host.bytes, 0) << shape.label();
    }
}

TEST(SweepPagedProblem, BadInputNamesTheField) {
  bench::MatrixShape shape = smoke_shapes(Family::fwd_pagedkv).front();
  const KernelConfig contiguous = paged_kernel(shape, PageTableKind::none, KvLayout::nhd);
  auto message = [](const bench::MatrixShape& s, const KernelConfig& k) -> std::string {
    HostProblem host;
    try {
      cli::build_host_problem(s, k, host);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(shape, contiguous).rfind("page_table:", 0), 0u) << message(shape, contiguous);
  shape.page_size = 0;
  const KernelConfig paged = paged_kernel(shape, PageTableKind::vllm_block_table, KvLayout::nhd);
  EXPECT_EQ(message(shape, paged).rfind("page_size 0", 0), 0u) << message(shape, paged);
}

// The form the sweep times (index arrays where the kernels read them, host vectors empty) is a
// valid problem for every paged shape and table form; here the "device" is host memory.
TEST(SweepPagedProblem, IndexArraysOnTheDeviceFormValidate) {
  for (Family family : {Family::fwd_pagedkv, Family::batch_prefill})
    for (const bench::MatrixShape& shape : smoke_shapes(family)) {
      const KernelConfig kernel =
          paged_kernel(shape,
                       family == Family::batch_prefill ? PageTableKind::vllm_block_table
                                                       : PageTableKind::sglang_page_list,
                       KvLayout::nhd);
      const HostProblem host = build(shape, kernel);
      std::vector<std::vector<std::byte>> placed;
      const Problem p = cli::with_placed_indices(host.problem, [&](auto array) {
        placed.emplace_back(array.begin(), array.end());
        return static_cast<const void*>(placed.back().data());
      });
      EXPECT_TRUE(p.seqstart_q.empty() && p.seqstart_k.empty() && p.seqlen_k_per_batch.empty());
      EXPECT_TRUE(p.paged.block_table.empty() && p.paged.page_indices.empty());
      EXPECT_TRUE(p.device_indices.seqlen_k) << shape.label();
      EXPECT_EQ(p.device_indices.seqstart_q != nullptr, family == Family::batch_prefill);
      EXPECT_TRUE(p.device_indices.page_table()) << shape.label();
      try {
        validate(p);
      } catch (const Error& e) {
        ADD_FAILURE() << shape.label() << ": " << e.what();
      }
      // The placed key lengths are the host problem's.
      const auto* lengths = p.device_indices.seqlen_k;
      for (int64_t b = 0; b < p.batch; ++b)
        EXPECT_EQ(lengths[b], host.problem.key_length(b)) << shape.label() << " sequence " << b;
    }
}

TEST(SweepPagedProblem, AppendKvRowsSayWhichFamilyIsNotTimed) {
  const auto shapes = smoke_shapes(Family::fwd_appendkv);
  ASSERT_FALSE(shapes.empty());
  HostProblem host;
  KernelConfig kernel;
  kernel.family = Family::fwd_appendkv;
  const std::string why = cli::build_host_problem(shapes.front(), kernel, host);
  EXPECT_NE(why.find("fwd_appendkv"), std::string::npos) << why;
}

// The smallest smoke batch_prefill shape (two 128-token sequences) and page size 16.
bench::MatrixShape small_prefill() {
  for (const bench::MatrixShape& shape : smoke_shapes(Family::batch_prefill))
    if (shape.varlen == std::vector<int64_t>{128, 128} && shape.page_size == 16) return shape;
  ADD_FAILURE() << "no batch_prefill shape varlen [128 128] page 16 in the smoke tier";
  return {};
}

// What a GPU kernel would have written, computed by the reference from `as_read` (the problem
// a kernel may have misread) into `host`'s O.
void write_output(const HostProblem& host, Problem as_read) {
  as_read.o = host.problem.o;
  reference::run(as_read);
}

// The reference reads only the sequences' keys: over a NaN-trapped pool with ragged key lengths
// (a decode shape, vLLM table with NaN padding entries) the right output is finite and passes.
TEST(SweepRowValidation, RaggedDecodeOverTheTrappedPoolPasses) {
  for (const bench::MatrixShape& shape : smoke_shapes(Family::fwd_pagedkv)) {
    if (shape.seqlen_q != 1 || shape.page_size != 64 || shape.mask != MaskKind::causal) continue;
    HostProblem host =
        build(shape, paged_kernel(shape, PageTableKind::vllm_block_table, KvLayout::nhd));
    write_output(host, host.problem);
    for (int64_t e = 0; e < host.problem.o.numel(); ++e)
      ASSERT_TRUE(std::isfinite(numeric::load(host.problem.o.data, host.problem.o.dtype, e)));
    const cli::RowValidation v = cli::validate_row(host.problem);
    EXPECT_EQ(v.status, "passed") << v.report;
    return;
  }
  FAIL() << "no smoke pagedkv shape with seqlen_q 1, page 64, causal";
}

TEST(SweepRowValidation, PassesTheRightOutputAndFailsAWrongPageRead) {
  const bench::MatrixShape shape = small_prefill();
  HostProblem host =
      build(shape, paged_kernel(shape, PageTableKind::sglang_page_list, KvLayout::hnd));
  write_output(host, host.problem);
  const cli::RowValidation right = cli::validate_row(host.problem);
  EXPECT_EQ(right.status, "passed") << right.report;
  EXPECT_EQ(right.mismatches, 0);
  EXPECT_EQ(right.compared, host.problem.o.numel());

  // A kernel that reads sequence 1's second page from a spare page reads NaN.
  const Problem& p = host.problem;
  std::set<int32_t> in_use(p.paged.page_indices.begin(), p.paged.page_indices.end());
  int32_t spare = 0;
  while (in_use.count(spare)) ++spare;
  Problem misread = p;
  misread.paged.page_indices[static_cast<size_t>(p.paged.page_indptr[1] + 1)] = spare;
  write_output(host, misread);
  const cli::RowValidation nan_read = cli::validate_row(host.problem);
  EXPECT_EQ(nan_read.status, "failed");
  EXPECT_GT(nan_read.mismatches, 0);
  EXPECT_NE(nan_read.report.find("outside"), std::string::npos) << nan_read.report;

  // One reading another sequence's (finite) page is caught by value.
  misread = p;
  std::swap(misread.paged.page_indices[0], misread.paged.page_indices.back());
  write_output(host, misread);
  const cli::RowValidation swapped = cli::validate_row(host.problem);
  EXPECT_EQ(swapped.status, "failed");
  EXPECT_GT(swapped.max_abs_error, 0.05);
}

// The row columns: a pass marks the row validated, a skip leaves max_abs_error null, a failure
// turns the match into a mismatch whose reason carries the agreement lines.
TEST(SweepRowValidation, RowColumnsAndMismatchStatus) {
  cli::RowValidation v;
  v.status = "passed";
  v.scope = "every sequence, head and row";
  v.max_abs_error = 0.004;
  nlohmann::ordered_json row = {{"status", "match"}, {"reason", ""}};
  cli::put_validation(v, row);
  EXPECT_EQ(row["validated"], true);
  EXPECT_EQ(row["validation"], "passed: every sequence, head and row");
  EXPECT_EQ(row["max_abs_error"], 0.004);
  EXPECT_EQ(row["status"], "match");

  v.status = "skipped";
  v.scope = "skipped: over the budget";
  cli::put_validation(v, row);
  EXPECT_EQ(row["validated"], false);
  EXPECT_TRUE(row["max_abs_error"].is_null());
  EXPECT_EQ(row["status"], "match");

  v.status = "failed";
  v.scope = "every sequence, head and row";
  v.report = "o: max abs err 0.5, 3 of 10 outside\nlse: max abs err 0\n";
  cli::put_validation(v, row);
  EXPECT_EQ(row["validated"], false);
  EXPECT_EQ(row["status"], "mismatch");
  const std::string reason = row["reason"];
  EXPECT_NE(reason.find("o: max abs err 0.5, 3 of 10 outside;lse"), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\n'), std::string::npos) << "one CSV cell, one line";
}

TEST(SweepRowValidation, LargeFwdShapesAreSlicedOrSkipped) {
  bench::MatrixShape shape;
  for (const bench::MatrixShape& s : smoke_shapes(Family::fwd))
    if (s.group == "fwd_non_pow2" && s.seqlen_q == 129 && s.hdim_q == 64) {
      shape = s;
      if (s.mask == MaskKind::causal) break;
    }
  ASSERT_EQ(shape.mask, MaskKind::causal);
  HostProblem host = build(shape, KernelConfig{});
  write_output(host, host.problem);
  // Under a budget smaller than the problem, bench --verify's slice (seqlen_q == seqlen_k keeps
  // the bottom-right causal mask exact).
  const double work = cli::reference_work(host.problem);
  const cli::RowValidation sliced = cli::validate_row(host.problem, work / 4);
  EXPECT_EQ(sliced.status, "passed") << sliced.scope;
  EXPECT_LT(sliced.compared, host.problem.o.numel());

  // A window mask cannot be sliced: skipped, saying why.
  Problem window = host.problem;
  window.mask = {MaskKind::window, MaskAlign::bottom_right, 16, 0, 0};
  const cli::RowValidation skipped = cli::validate_row(window, 1.0);
  EXPECT_EQ(skipped.status, "skipped");
  EXPECT_NE(skipped.scope.find("budget"), std::string::npos) << skipped.scope;
}

}  // namespace
}  // namespace tilefmha
