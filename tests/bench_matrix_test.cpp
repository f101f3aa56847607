// The test-shape matrix (data/matrix): tier sizes and nesting, the coverage the benchmark
// promises (GQA ratios, asymmetric head dims, varlen with empty sequences, page sizes, fp8,
// decode, cross-attention, every family), well-formed problems, and strict errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

#include "bench/matrix.hpp"
#include "support/scratch_dirs.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

using bench::MatrixShape;
namespace fs = std::filesystem;

std::multiset<std::string> labels_of(const std::vector<MatrixShape>& shapes) {
  std::multiset<std::string> out;
  for (const MatrixShape& s : shapes) out.insert(s.group + ": " + s.label());
  return out;
}

TEST(BenchMatrix, TierSizesAndNesting) {
  const auto smoke = bench::load_matrix_tier("smoke");
  const auto full = bench::load_matrix_tier("full");
  const auto nightly = bench::load_matrix_tier("nightly");
  EXPECT_GE(smoke.size(), 150u);
  EXPECT_LE(smoke.size(), 600u);
  EXPECT_GE(full.size(), smoke.size() + 1000);
  EXPECT_GT(nightly.size(), full.size());
  const auto smoke_set = labels_of(smoke), full_set = labels_of(full),
             nightly_set = labels_of(nightly);
  EXPECT_TRUE(std::includes(full_set.begin(), full_set.end(), smoke_set.begin(), smoke_set.end()));
  EXPECT_TRUE(
      std::includes(nightly_set.begin(), nightly_set.end(), full_set.begin(), full_set.end()));
}

TEST(BenchMatrix, SmokeCoversEveryAxis) {
  const auto smoke = bench::load_matrix_tier("smoke");
  std::set<int64_t> gqa_ratios, page_sizes;
  std::set<Family> families;
  bool asymmetric = false, varlen_with_empty = false, fp8 = false, decode = false, cross = false,
       non_pow2 = false, long_seq = false, mqa = false;
  std::set<std::string> features;
  for (const MatrixShape& s : smoke) {
    gqa_ratios.insert(s.nhead_q / s.nhead_k);
    mqa |= s.nhead_k == 1 && s.nhead_q > 1;
    families.insert(s.family);
    if (s.page_table != PageTableKind::none) page_sizes.insert(s.page_size);
    asymmetric |= s.hdim_q == 192 && s.hdim_v == 128;
    varlen_with_empty |= std::count(s.varlen.begin(), s.varlen.end(), 0) > 0;
    fp8 |= s.dtype == DType::fp8_e4m3 || s.dtype == DType::fp8_e5m2;
    decode |= s.seqlen_q == 1;
    cross |= s.seqlen_q != s.seqlen_k && s.seqlen_q > 1;
    non_pow2 |= (s.seqlen_k & (s.seqlen_k - 1)) != 0;
    long_seq |= s.seqlen_k >= 32768;
    if (s.mask != MaskKind::none) features.insert("mask");
    if (s.bias != BiasKind::none) features.insert("bias");
    if (s.softcap) features.insert("softcap");
    if (s.dropout) features.insert("dropout");
    if (s.lse) features.insert("lse");
  }
  for (int64_t ratio : {1, 2, 4, 7, 8}) EXPECT_TRUE(gqa_ratios.count(ratio)) << ratio;
  EXPECT_TRUE(mqa);
  for (int64_t size : {1, 16, 64, 256}) EXPECT_TRUE(page_sizes.count(size)) << size;
  for (Family f : {Family::fwd, Family::fwd_splitkv, Family::fwd_pagedkv, Family::batch_prefill,
                   Family::fwd_appendkv, Family::bwd_dq_dk_dv})
    EXPECT_TRUE(families.count(f)) << to_string(f);
  EXPECT_TRUE(asymmetric && varlen_with_empty && fp8 && decode && cross && non_pow2 && long_seq);
  EXPECT_EQ(features.size(), 5u);
}

// What matching reads must be consistent: group mode prefix sums end at the total, paged
// problems have a table covering every key, GQA divides, fp8 inputs carry scales.
TEST(BenchMatrix, EveryNightlyShapeBecomesAWellFormedProblem) {
  for (const MatrixShape& s : bench::load_matrix_tier("nightly")) {
    const Problem p = s.to_problem();
    SCOPED_TRACE(s.label());
    ASSERT_EQ(p.nhead_q % p.nhead_k, 0);
    ASSERT_GT(p.hdim_q, 0);
    ASSERT_GT(p.hdim_v, 0);
    if (p.mode == Mode::group) {
      ASSERT_EQ(p.seqstart_q.size(), s.varlen.size() + 1);
      int64_t total = 0;
      for (int64_t n : s.varlen) total += n;
      ASSERT_EQ(p.seqstart_q.back(), total);
      ASSERT_EQ(p.seqlen_q, *std::max_element(s.varlen.begin(), s.varlen.end()));
    } else {
      ASSERT_GT(p.seqlen_q, 0);
      ASSERT_GT(p.seqlen_k, 0);
    }
    if (p.is_paged()) {
      ASSERT_GT(p.paged.page_size, 0);
      ASSERT_GE(p.paged.max_pages_per_seq * p.paged.page_size, p.seqlen_k);
    }
    if (p.dtype == DType::fp8_e4m3 || p.dtype == DType::fp8_e5m2) {
      ASSERT_NE(p.fp8.kind, Fp8ScaleKind::none);
      ASSERT_EQ(p.out_dtype, DType::bf16);
    } else {
      ASSERT_EQ(p.out_dtype, p.dtype);
    }
    ASSERT_EQ(p.return_lse, s.lse);
    ASSERT_EQ(p.has_dropout(), s.dropout);
  }
}

TEST(BenchMatrix, GroupsExpandAsCartesianProducts) {
  const fs::path dir = testing::fresh_test_dir("bench_matrix_test") / "product";
  fs::create_directories(dir);
  std::ofstream(dir / "tiny.json") << R"({"groups": [{"name": "g", "heads": [[8, 2], 4],
      "hdim": [64, [192, 128]], "seqlen": [100, [1, 300], 7], "mask": ["none", "causal"]}]})";
  const auto shapes = bench::load_matrix_file(dir / "tiny.json");
  ASSERT_EQ(shapes.size(), 2u * 2 * 3 * 2);
  std::set<std::string> unique;
  for (const MatrixShape& s : shapes) unique.insert(s.label());
  EXPECT_EQ(unique.size(), shapes.size());
  EXPECT_EQ(shapes.front().nhead_q, 8);
  EXPECT_EQ(shapes.front().nhead_k, 2);
  EXPECT_EQ(shapes.back().hdim_q, 192);
  EXPECT_EQ(shapes.back().hdim_v, 128);
  EXPECT_EQ(shapes.back().mask, MaskKind::causal);
}

void expect_error_naming(const std::string& text, const std::string& needle) {
  const fs::path dir = testing::fresh_test_dir("bench_matrix_test") / "bad";
  fs::create_directories(dir);
  std::ofstream(dir / "bad.json") << text;
  try {
    bench::load_matrix_file(dir / "bad.json");
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BenchMatrix, BadFilesAreErrorsNamingTheKeyOrValue) {
  const std::string ok_axes = R"("hdim": [64], "seqlen": [128])";
  expect_error_naming(R"({"groups": [{"name": "g", "hdims": [64], "seqlen": [1]}]})", "hdims");
  expect_error_naming(R"({"groups": [{"name": "g", )" + ok_axes + R"(, "mask": ["diagonal"]}]})",
                      "diagonal");
  expect_error_naming(R"({"groups": [{"name": "g", )" + ok_axes + R"(, "family": ["fwdd"]}]})",
                      "fwdd");
  expect_error_naming(R"({"groups": [{"name": "g", )" + ok_axes + R"(, "heads": [[8, 3]]}]})",
                      "nhead_k 3");
  expect_error_naming(R"({"groups": [{"name": "g", "hdim": [64], "seqlen": [0]}]})", "seqlen");
  expect_error_naming(R"({"groups": [{"name": "g", "family": ["fwd_pagedkv"], )" + ok_axes + "}]}",
                      "page_table");
  expect_error_naming(R"({"groups": [{"name": "g", )" + ok_axes + R"(}], "tier": "x"})", "tier");
  expect_error_naming(R"({"groups": [{"name": "g", "hdim": [64], "varlen": [[0, 0]]}]})",
                      "every sequence is empty");
  expect_error_naming(R"({"groups": [{"hdim": [64]}]})", "name");
  expect_error_naming(R"({"include": ["bad"], "groups": []})", "include cycle");
}

TEST(BenchMatrix, UnknownTierIsAnError) {
  EXPECT_THROW(bench::load_matrix_tier("weekly"), Error);
}

}  // namespace
}  // namespace tilefmha
