// `tilefmha run` refuses inputs it used to misread (page ids wider than int32, non-finite sink
// logits, fp8 descales of a non-fp8 run, seeds out of range, a directory as a file, sizes past
// memory) with exit code 2, a message naming the field or file, and nothing written; and it
// runs the edge cases that are valid (no query rows, no keys).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/npy.hpp"
#include "support/run_cli.hpp"
#include "support/scratch_dirs.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

fs::path fresh_dir() {
  return testing::fresh_test_dir("cli_bad_input_test");
}

// Expects exit code 2, `message` in the output, and no directory at `save` (nothing written).
void expect_refused(const std::string& arguments, const std::string& message,
                    const fs::path& save) {
  const CliResult result = run_cli(arguments + " --save " + save.string());
  EXPECT_EQ(result.exit_code, 2) << arguments << "\n" << result.output;
  EXPECT_NE(result.output.find(message), std::string::npos) << arguments << "\n" << result.output;
  EXPECT_FALSE(fs::exists(save)) << save;
}

void write_int64(const fs::path& path, std::vector<int64_t> shape,
                 const std::vector<int64_t>& values) {
  io::NpyArray array;
  array.dtype = DType::int64;
  array.shape = std::move(shape);
  array.bytes.resize(values.size() * sizeof(int64_t));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  io::write_npy(path, array);
}

void write_float(const fs::path& path, std::vector<int64_t> shape, std::vector<float> values) {
  io::NpyArray array;
  array.dtype = DType::fp32;
  array.shape = std::move(shape);
  array.bytes.resize(values.size() * sizeof(float));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  io::write_npy(path, array);
}

constexpr const char* kSmall = "run --threads 1 --nhead-q 1 --hdim-q 32";

TEST(CliBadInput, PageIdsWiderThanInt32AreRefusedNamingTheEntry) {
  const fs::path dir = fresh_dir();
  const std::string vllm = std::string(kSmall) + " --family fwd_pagedkv --seqlen-q 1 --seqlen-k 40";
  ASSERT_EQ(run_cli(vllm + " --save " + (dir / "vllm").string()).exit_code, 0);
  // 40 keys in pages of 16: a [1, 3] table; entry [0, 1] = 2^40 would narrow to page 0.
  write_int64(dir / "vllm" / "block_table.npy", {1, 3}, {0, int64_t{1} << 40, 2});
  expect_refused(vllm + " --load " + (dir / "vllm").string(),
                 "block_table.npy entry [0, 1] = 1099511627776 does not fit the int32 page ids",
                 dir / "out1");

  const std::string sglang = std::string(kSmall) +
                             " --family batch_prefill --page-table sglang --mode group "
                             "--seqlens-q 2,3 --seqlens-k 20,30";
  ASSERT_EQ(run_cli(sglang + " --save " + (dir / "sglang").string()).exit_code, 0);
  // 2 + 2 pages; entry [2] = 2^32 + 3 would narrow to page 3.
  write_int64(dir / "sglang" / "page_indices.npy", {4}, {0, 1, (int64_t{1} << 32) + 3, 2});
  expect_refused(sglang + " --load " + (dir / "sglang").string(),
                 "page_indices.npy entry [2] = 4294967299 does not fit the int32 page ids",
                 dir / "out2");
}

TEST(CliBadInput, NonFiniteSinkLogitsAreRefused) {
  const fs::path dir = fresh_dir();
  for (const char* value : {"nan", "inf", "-inf"})
    expect_refused(
        std::string(kSmall) + " --seqlen-q 4 --sink-logit " + value,
        std::string("--sink-logit ") + (value[0] == '-' ? "-inf" : value) + " must be finite",
        dir / "out");
  const std::string flags = std::string(kSmall) + " --seqlen-q 4 --sink-logit 1";
  ASSERT_EQ(run_cli(flags + " --save " + (dir / "in").string()).exit_code, 0);
  write_float(dir / "in" / "sink_logits.npy", {1}, {std::nanf("")});
  expect_refused(std::string(kSmall) + " --seqlen-q 4 --load " + (dir / "in").string(),
                 "sink_logits[0] = nan must be finite", dir / "out");
}

TEST(CliBadInput, Fp8DescalesOfANonFp8RunAreRefused) {
  const fs::path dir = fresh_dir();
  const std::string flags = std::string(kSmall) + " --seqlen-q 4";
  ASSERT_EQ(run_cli(flags + " --save " + (dir / "in").string()).exit_code, 0);
  write_float(dir / "in" / "k_descale.npy", {}, {0.5f});
  expect_refused(flags + " --load " + (dir / "in").string(),
                 "k_descale.npy is an fp8 descale, but --dtype bf16 is not fp8", dir / "out");
}

TEST(CliBadInput, SeedsOutsideUint64AreRefusedNotWrapped) {
  const fs::path dir = fresh_dir();
  const std::string flags = std::string(kSmall) + " --seqlen-q 4 --dropout 0.1";
  expect_refused(flags + " --seed -1", "--seed: '-1' is not an integer in [0, 2^64 - 1]",
                 dir / "out");
  expect_refused(flags + " --seed 18446744073709551616",
                 "--seed: '18446744073709551616' exceeds 2^64 - 1", dir / "out");
  expect_refused(flags + " --offset 1e3", "--offset: '1e3' is not an integer", dir / "out");
  // The largest seed is exact.
  EXPECT_EQ(run_cli(flags + " --seed 18446744073709551615").exit_code, 0);
}

TEST(CliBadInput, ADirectoryNamedLikeAFileIsRefused) {
  const fs::path dir = fresh_dir();
  const std::string flags = std::string(kSmall) + " --seqlen-q 4";
  ASSERT_EQ(run_cli(flags + " --save " + (dir / "in").string()).exit_code, 0);
  fs::remove(dir / "in" / "q.npy");
  fs::create_directory(dir / "in" / "q.npy");
  expect_refused(flags + " --load " + (dir / "in").string(),
                 "q.npy: is a directory, not a .npy file", dir / "out");
}

TEST(CliBadInput, ProblemsTooLargeAreRefusedBeforeAllocating) {
  const fs::path dir = fresh_dir();
  // 2^70-odd bytes: past int64.
  expect_refused("run --seqlen-q 4000000000000 --nhead-q 100000000 --hdim-q 128",
                 "problem too large: 1.024e+23 bytes for q [batch, seqlen_q, nhead_q, hdim_q]",
                 dir / "out");
  // 256 TB: within int64, past any machine's memory.
  expect_refused("run --seqlen-q 1000000000 --nhead-q 1000 --hdim-q 128",
                 "problem too large: 256000000000000 bytes for q", dir / "out");
}

TEST(CliBadInput, EmptyQueriesAndEmptyKeysAreValid) {
  const fs::path dir = fresh_dir();
  // No query rows: an empty problem, as an empty tensor is in Python.
  const CliResult empty = run_cli(std::string(kSmall) + " --seqlen-q 0 --seqlen-k 5 --save " +
                                  (dir / "empty").string());
  ASSERT_EQ(empty.exit_code, 0) << empty.output;
  EXPECT_EQ(io::read_npy(dir / "empty" / "o.npy").shape, (std::vector<int64_t>{1, 0, 1, 32}));
  // A varlen batch whose keys are all padding (total_k = 0): O = 0, LSE = -inf.
  const CliResult no_keys =
      run_cli(std::string(kSmall) + " --mode group --seqlens-q 3,4 --seqlens-k 0,0 --lse --save " +
              (dir / "no_keys").string());
  ASSERT_EQ(no_keys.exit_code, 0) << no_keys.output;
  const io::NpyArray lse = io::read_npy(dir / "no_keys" / "lse.npy");
  const io::NpyArray o = io::read_npy(dir / "no_keys" / "o.npy");
  ASSERT_EQ(lse.numel(), 7);
  for (int64_t i = 0; i < lse.numel(); ++i) {
    float value;
    std::memcpy(&value, lse.bytes.data() + i * 4, 4);
    EXPECT_EQ(value, -INFINITY);
  }
  for (int64_t i = 0; i < o.numel(); ++i) {
    float value;
    std::memcpy(&value, o.bytes.data() + i * 4, 4);
    ASSERT_EQ(value, 0.0f);
  }
}

}  // namespace
}  // namespace tilefmha
