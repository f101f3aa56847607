// `tilefmha run` end to end: the binary is run as a user would, and its files are read back
// with the .npy reader.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/npy.hpp"
#include "jit/cuda_driver.hpp"
#include "support/run_cli.hpp"
#include "support/scratch_dirs.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;

using tilefmha::testing::CliResult;
using tilefmha::testing::run_cli;

// A fresh directory per test, under the test's temp dir.
fs::path fresh_dir() {
  return testing::fresh_test_dir("cli_run_test");
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> floats(const io::NpyArray& array) {
  EXPECT_EQ(array.dtype, DType::fp32);
  std::vector<float> values(static_cast<size_t>(array.numel()));
  std::memcpy(values.data(), array.bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<int64_t> integers(const io::NpyArray& array) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < array.numel(); ++i) {
    if (array.dtype == DType::int64) {
      int64_t v;
      std::memcpy(&v, array.bytes.data() + i * 8, 8);
      values.push_back(v);
    } else {
      int32_t v;
      std::memcpy(&v, array.bytes.data() + i * 4, 4);
      values.push_back(v);
    }
  }
  return values;
}

void write_floats(const fs::path& path, std::vector<int64_t> shape,
                  const std::vector<float>& data) {
  io::NpyArray array;
  array.dtype = DType::fp32;
  array.shape = std::move(shape);
  array.bytes.resize(data.size() * sizeof(float));
  std::memcpy(array.bytes.data(), data.data(), array.bytes.size());
  io::write_npy(path, array);
}

using Shape = std::vector<int64_t>;

TEST(CliRun, DefaultsRunAndPrintOneSummaryLine) {
  const CliResult result = run_cli("run --threads 2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  for (const char* part : {"fwd bf16 batch b=1 h=8/8", "backend cpu, 2 threads", " ms", "o sum="})
    EXPECT_NE(result.output.find(part), std::string::npos) << part << " in " << result.output;
}

TEST(CliRun, HelpListsTheFlagsAndTheFileContract) {
  const CliResult result = run_cli("run --help");
  ASSERT_EQ(result.exit_code, 0);
  for (const char* flag :
       {"--family",    "--dtype",        "--out-dtype",     "--batch",     "--nhead-q",
        "--nhead-k",   "--seqlen-q",     "--seqlen-k",      "--hdim-q",    "--hdim-v",
        "--layout",    "--mode",         "--seqlens-q",     "--seqlens-k", "--causal",
        "--window",    "--window-align", "--sink-tokens",   "--scale",     "--softcap",
        "--bias",      "--sink-logit",   "--lse",           "--dropout",   "--seed",
        "--offset",    "--splits",       "--page-table",    "--page-size", "--kv-layout",
        "--fp8-scale", "--backend",      "--input-seed",    "--load",      "--save",
        "--threads",   "q.npy",          "block_table.npy", "float32",     "rounded"})
    EXPECT_NE(result.output.find(flag), std::string::npos) << flag;
}

TEST(CliRun, SaveThenLoadReproducesTheOutputBytes) {
  const fs::path dir = fresh_dir();
  const std::string flags =
      "run --seqlen-q 24 --seqlen-k 40 --nhead-q 4 --nhead-k 2 --hdim-q 64 "
      "--causal bottom_right --lse --dtype fp16 --layout bhsd";
  const CliResult first = run_cli(flags + " --input-seed 5 --save " + (dir / "a").string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CliResult again =
      run_cli(flags + " --load " + (dir / "a").string() + " --save " + (dir / "b").string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  for (const char* name : {"q.npy", "k.npy", "v.npy", "o.npy", "lse.npy"})
    EXPECT_EQ(file_bytes(dir / "a" / name), file_bytes(dir / "b" / name)) << name;
  EXPECT_EQ(io::read_npy(dir / "a" / "o.npy").shape, (Shape{1, 24, 4, 64}));
  EXPECT_EQ(io::read_npy(dir / "a" / "lse.npy").shape, (Shape{1, 4, 24}));
  // A different seed gives different data, so the equality above is not vacuous.
  const CliResult other = run_cli(flags + " --input-seed 6 --save " + (dir / "c").string());
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_NE(file_bytes(dir / "a" / "o.npy"), file_bytes(dir / "c" / "o.npy"));
}

TEST(CliRun, WrongShapeExitsTwoAndWritesNothing) {
  const fs::path dir = fresh_dir();
  ASSERT_EQ(run_cli("run --seqlen-q 16 --hdim-q 32 --save " + (dir / "in").string()).exit_code, 0);

  const CliResult result = run_cli("run --seqlen-q 8 --hdim-q 32 --load " + (dir / "in").string() +
                                   " --save " + (dir / "out").string());
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("q.npy"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("[1, 16, 8, 32]"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("[1, 8, 8, 32]"), std::string::npos) << result.output;
  EXPECT_FALSE(fs::exists(dir / "out"));

  // An existing save directory stays as it was.
  fs::create_directories(dir / "kept");
  std::ofstream(dir / "kept" / "o.npy") << "old";
  EXPECT_EQ(run_cli("run --seqlen-q 8 --hdim-q 32 --load " + (dir / "in").string() + " --save " +
                    (dir / "kept").string())
                .exit_code,
            2);
  EXPECT_EQ(file_bytes(dir / "kept" / "o.npy"), "old");
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir)) entries += entry.exists();
  EXPECT_EQ(entries, 2) << "no staging directory may be left behind";
}

TEST(CliRun, BadFlagsMissingFilesAndInvalidProblemsExitTwo) {
  const fs::path dir = fresh_dir();
  EXPECT_EQ(run_cli("run --no-such-flag").exit_code, 2);
  EXPECT_EQ(run_cli("run --dtype int7").exit_code, 2);
  EXPECT_EQ(run_cli("run --window 3").exit_code, 2);
  const CliResult forward_deterministic = run_cli("run --deterministic");
  EXPECT_EQ(forward_deterministic.exit_code, 2);
  EXPECT_NE(forward_deterministic.output.find("--deterministic applies to the backward"),
            std::string::npos)
      << forward_deterministic.output;

  // Without a GPU the GPU backend is a usage error; --validate alone needs --backend gpu.
  if (!jit::gpu_unavailable_reason().empty()) {
    const CliResult gpu = run_cli("run --backend gpu");
    EXPECT_EQ(gpu.exit_code, 2);
    EXPECT_NE(gpu.output.find("GPU backend unavailable"), std::string::npos) << gpu.output;
  }
  EXPECT_EQ(run_cli("run --validate").exit_code, 2);

  ASSERT_EQ(run_cli("run --seqlen-q 8 --hdim-q 32 --save " + (dir / "in").string()).exit_code, 0);
  fs::remove(dir / "in" / "k.npy");
  const CliResult missing = run_cli("run --seqlen-q 8 --hdim-q 32 --load " + (dir / "in").string() +
                                    " --save " + (dir / "out").string());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("k.npy"), std::string::npos) << missing.output;
  EXPECT_FALSE(fs::exists(dir / "out"));

  std::ofstream(dir / "in" / "k.npy") << "\x93NUMPY garbage";
  const CliResult corrupt = run_cli("run --seqlen-q 8 --hdim-q 32 --load " + (dir / "in").string());
  EXPECT_EQ(corrupt.exit_code, 2);
  EXPECT_NE(corrupt.output.find("k.npy"), std::string::npos) << corrupt.output;

  const CliResult invalid =
      run_cli("run --nhead-q 6 --nhead-k 4 --seqlen-q 8 --save " + (dir / "invalid").string());
  EXPECT_EQ(invalid.exit_code, 2);
  EXPECT_NE(invalid.output.find("nhead"), std::string::npos) << invalid.output;
  EXPECT_FALSE(fs::exists(dir / "invalid"));
}

// With one key, softmax weights are all 1: every output row is that key's V row.
TEST(CliRun, SingleKeyOutputIsTheValueRow) {
  const fs::path dir = fresh_dir();
  const CliResult result = run_cli(
      "run -b 2 --seqlen-q 5 --seqlen-k 1 --nhead-q 4 --nhead-k 2 --hdim-q 16 --hdim-v 8 "
      "--dtype fp32 --save " +
      dir.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto v = floats(io::read_npy(dir / "v.npy"));
  const auto o = floats(io::read_npy(dir / "o.npy"));
  ASSERT_EQ(o.size(), 2u * 5 * 4 * 8);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 5; ++i)
      for (int h = 0; h < 4; ++h)
        for (int d = 0; d < 8; ++d)
          EXPECT_EQ(o[((b * 5 + i) * 4 + h) * 8 + d], v[(b * 2 + h / 2) * 8 + d]);
}

// Hand-made inputs through --load against softmax(q k^T * scale) v computed here.
TEST(CliRun, LoadedInputsGiveTheTextbookAttention) {
  const fs::path dir = fresh_dir();
  const int sq = 3, sk = 4, heads = 2, dim = 4;
  std::vector<float> q, k, v;
  for (int n = 0; n < sq * heads * dim; ++n) q.push_back(std::sin(0.7f * n));
  for (int n = 0; n < sk * heads * dim; ++n) k.push_back(std::cos(0.3f * n));
  for (int n = 0; n < sk * heads * dim; ++n) v.push_back(0.1f * (n % 7) - 0.2f);
  write_floats(dir / "q.npy", {1, sq, heads, dim}, q);
  write_floats(dir / "k.npy", {1, sk, heads, dim}, k);
  write_floats(dir / "v.npy", {1, sk, heads, dim}, v);
  const CliResult result = run_cli(
      "run --dtype fp32 --seqlen-q 3 --seqlen-k 4 --nhead-q 2 --hdim-q 4 --scale 0.5 "
      "--lse --load " +
      dir.string() + " --save " + (dir / "out").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto o = floats(io::read_npy(dir / "out" / "o.npy"));
  const auto lse = floats(io::read_npy(dir / "out" / "lse.npy"));
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < sq; ++i) {
      std::vector<double> s(sk);
      double total = 0;
      for (int j = 0; j < sk; ++j) {
        double dot = 0;
        for (int d = 0; d < dim; ++d)
          dot += double(q[(i * heads + h) * dim + d]) * k[(j * heads + h) * dim + d];
        s[j] = std::exp(0.5 * dot);
        total += s[j];
      }
      EXPECT_NEAR(lse[h * sq + i], std::log(total), 1e-5);
      for (int d = 0; d < dim; ++d) {
        double expected = 0;
        for (int j = 0; j < sk; ++j) expected += s[j] / total * v[(j * heads + h) * dim + d];
        EXPECT_NEAR(o[(i * heads + h) * dim + d], expected, 1e-6);
      }
    }
  }
}

TEST(CliRun, GroupModeSavesTheDocumentedFiles) {
  const fs::path dir = fresh_dir();
  const CliResult result = run_cli(
      "run --mode group --seqlens-q 3,0,6 --seqlens-k 5,2,9 --nhead-q 4 --nhead-k 2 --hdim-q 32 "
      "--hdim-v 16 --lse --save " +
      dir.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(io::read_npy(dir / "q.npy").shape, (Shape{9, 4, 32}));
  EXPECT_EQ(io::read_npy(dir / "k.npy").shape, (Shape{16, 2, 32}));
  EXPECT_EQ(io::read_npy(dir / "v.npy").shape, (Shape{16, 2, 16}));
  EXPECT_EQ(io::read_npy(dir / "o.npy").shape, (Shape{9, 4, 16}));
  EXPECT_EQ(io::read_npy(dir / "lse.npy").shape, (Shape{4, 9}));
  EXPECT_EQ(integers(io::read_npy(dir / "seqstart_q.npy")), (Shape{0, 3, 3, 9}));
  EXPECT_EQ(integers(io::read_npy(dir / "seqstart_k.npy")), (Shape{0, 5, 7, 16}));

  // The seqstart files alone define group mode on reload.
  const CliResult again = run_cli(
      "run --nhead-q 4 --nhead-k 2 --hdim-q 32 --hdim-v 16 --lse "
      "--load " +
      dir.string() + " --save " + (dir / "b").string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("group b=3"), std::string::npos) << again.output;
  EXPECT_EQ(file_bytes(dir / "o.npy"), file_bytes(dir / "b" / "o.npy"));
}

TEST(CliRun, BackwardSavesGradientsShapedLikeTheirInputs) {
  const fs::path dir = fresh_dir();
  const CliResult result = run_cli(
      "run --family bwd -b 2 --seqlen-q 6 --seqlen-k 10 --nhead-q 4 --nhead-k 2 --hdim-q 32 "
      "--hdim-v 16 --bias elementwise --save " +
      dir.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("dq sum="), std::string::npos) << result.output;
  EXPECT_EQ(io::read_npy(dir / "dq.npy").shape, (Shape{2, 6, 4, 32}));
  EXPECT_EQ(io::read_npy(dir / "dk.npy").shape, (Shape{2, 10, 2, 32}));
  EXPECT_EQ(io::read_npy(dir / "dv.npy").shape, (Shape{2, 10, 2, 16}));
  EXPECT_EQ(io::read_npy(dir / "do.npy").shape, (Shape{2, 6, 4, 16}));
  EXPECT_EQ(io::read_npy(dir / "dbias.npy").shape, (Shape{2, 4, 6, 10}));
  // Softmax rows sum to one, so dbias (= dS) sums to zero over keys for every query row.
  const auto dbias = floats(io::read_npy(dir / "dbias.npy"));
  for (size_t row = 0; row < dbias.size() / 10; ++row) {
    double total = 0, magnitude = 0;
    for (int j = 0; j < 10; ++j) {
      total += dbias[row * 10 + j];
      magnitude += std::fabs(dbias[row * 10 + j]);
    }
    EXPECT_NEAR(total, 0.0, 1e-2 * magnitude + 1e-6) << "row " << row;
  }

  // Deterministic mode computes the same gradients on the CPU reference (every sum there runs
  // in a fixed order already).
  const CliResult deterministic = run_cli(
      "run --family bwd -b 2 --seqlen-q 6 --seqlen-k 10 --nhead-q 4 --nhead-k 2 --hdim-q 32 "
      "--hdim-v 16 --bias elementwise --deterministic --save " +
      (dir / "det").string());
  ASSERT_EQ(deterministic.exit_code, 0) << deterministic.output;
  EXPECT_EQ(file_bytes(dir / "dq.npy"), file_bytes(dir / "det" / "dq.npy"));

  const fs::path group = dir / "group";
  const CliResult grouped = run_cli(
      "run --family bwd_dq_dk_dv --mode group --seqlens-q 2,5 "
      "--seqlens-k 3,7 --hdim-q 32 --nhead-q 2 --save " +
      group.string());
  ASSERT_EQ(grouped.exit_code, 0) << grouped.output;
  EXPECT_EQ(io::read_npy(group / "dq.npy").shape, (Shape{7, 2, 32}));
  EXPECT_EQ(io::read_npy(group / "dk.npy").shape, (Shape{10, 2, 32}));
  EXPECT_EQ(io::read_npy(group / "dv.npy").shape, (Shape{10, 2, 32}));
}

// The page table only moves K/V around: a paged run sees the same keys as a contiguous one
// from the same seed, and its saved pool plus block table reload to the same output.
TEST(CliRun, PagedRunsMatchContiguousOnesAndReload) {
  const fs::path dir = fresh_dir();
  const std::string shape = "-b 3 --seqlen-q 20 --seqlen-k 37 --nhead-q 2 --hdim-q 32 ";
  ASSERT_EQ(run_cli("run " + shape + "--save " + (dir / "flat").string()).exit_code, 0);
  const CliResult paged = run_cli("run --family fwd_pagedkv --page-size 8 --kv-layout hnd " +
                                  shape + "--save " + (dir / "paged").string());
  ASSERT_EQ(paged.exit_code, 0) << paged.output;
  EXPECT_EQ(file_bytes(dir / "flat" / "o.npy"), file_bytes(dir / "paged" / "o.npy"));
  const auto table = io::read_npy(dir / "paged" / "block_table.npy");
  EXPECT_EQ(table.dtype, DType::int32);
  EXPECT_EQ(table.shape, (Shape{3, 5}));
  EXPECT_EQ(io::read_npy(dir / "paged" / "k.npy").shape, (Shape{15, 8, 2, 32}));
  auto pages = integers(table);
  std::sort(pages.begin(), pages.end());
  for (int64_t p = 0; p < 15; ++p) EXPECT_EQ(pages[p], p) << "every pool page used once";

  const CliResult reload = run_cli("run --family fwd_pagedkv --page-size 8 " + shape + "--load " +
                                   (dir / "paged").string() + " --save " + (dir / "re").string());
  ASSERT_EQ(reload.exit_code, 0) << reload.output;
  EXPECT_EQ(file_bytes(dir / "paged" / "o.npy"), file_bytes(dir / "re" / "o.npy"));
}

TEST(CliRun, SplitKvWritesTheSameOutputAsOneForward) {
  const fs::path dir = fresh_dir();
  const std::string shape = "--dtype fp32 --seqlen-q 8 --seqlen-k 300 --nhead-q 2 --hdim-q 32 ";
  ASSERT_EQ(run_cli("run " + shape + "--save " + (dir / "one").string()).exit_code, 0);
  const CliResult split = run_cli("run --family fwd_splitkv --splits 3 " + shape + "--save " +
                                  (dir / "split").string());
  ASSERT_EQ(split.exit_code, 0) << split.output;
  EXPECT_NE(split.output.find("splits=3"), std::string::npos) << split.output;
  const auto one = floats(io::read_npy(dir / "one" / "o.npy"));
  const auto parts = floats(io::read_npy(dir / "split" / "o.npy"));
  ASSERT_EQ(one.size(), parts.size());
  for (size_t n = 0; n < one.size(); ++n) EXPECT_NEAR(one[n], parts[n], 1e-6) << n;
}

// --splits on the CPU: at least 1 (the default), and N > 1 runs a forward as the split-KV stages.
// For fwd on the GPU it is the engine's split request, 0 (automatic, its default) included; flags
// are checked before the GPU is opened, so those refusals hold on any machine.
TEST(CliRun, SplitsAreStagesOnTheCpuAndTheEnginesRequestOnTheGpu) {
  const std::string shape = "--dtype fp32 --seqlen-q 8 --seqlen-k 300 --nhead-q 2 --hdim-q 32 ";
  const CliResult zero = run_cli("run --splits 0 " + shape);
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.output.find("--splits 0 must be at least 1"), std::string::npos) << zero.output;
  const CliResult one = run_cli("run " + shape);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(one.output.find("splits="), std::string::npos) << one.output;
  const CliResult staged = run_cli("run --splits 3 " + shape);
  ASSERT_EQ(staged.exit_code, 0) << staged.output;
  EXPECT_NE(staged.output.find("splits=3"), std::string::npos) << staged.output;

  const CliResult negative = run_cli("run --backend gpu --splits -1 " + shape);
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.output.find("--splits -1 must be at least 0"), std::string::npos)
      << negative.output;
  // Only fwd is one engine call on the GPU; the other families keep the CPU's rule.
  const CliResult staged_family =
      run_cli("run --backend gpu --family fwd_splitkv --splits 0 " + shape);
  EXPECT_EQ(staged_family.exit_code, 2);
  EXPECT_NE(staged_family.output.find("--splits 0 must be at least 1"), std::string::npos)
      << staged_family.output;
  const CliResult help = run_cli("run --help");
  EXPECT_NE(help.output.find("0 = it chooses"), std::string::npos) << help.output;
}

// FP8 inputs on the GPU backend: --validate's help gives their tolerance, and the flags are
// checked before the GPU is opened (--validate needs --backend gpu; without a GPU, --backend gpu
// is a usage error). Per-block descales exercise the tables the GPU run mirrors to the device.
TEST(CliRun, Fp8GpuFlagsAreCheckedBeforeTheGpuIsOpened) {
  const CliResult help = run_cli("run --help");
  for (const char* part : {"fp8 inputs", "2^-4*max|dequantized V|", "2e-3 + 2^-9*|ref|",
                           "bf16 1.6e-2", "LSE 1e-3 + 1e-4*|ref|"})
    EXPECT_NE(help.output.find(part), std::string::npos) << part << " in " << help.output;

  const std::string fp8 =
      " --dtype fp8_e4m3 --fp8-scale per_block --seqlen-q 130 --hdim-q 32 --nhead-q 2 "
      "--causal top_left --threads 2";
  const CliResult cpu_validate = run_cli("run --validate" + fp8);
  EXPECT_EQ(cpu_validate.exit_code, 2) << cpu_validate.output;
  EXPECT_NE(cpu_validate.output.find("need --backend gpu"), std::string::npos)
      << cpu_validate.output;
  for (const char* dtype : {"fp8_e4m3", "fp8_e5m2"}) {
    const CliResult bad_scale =
        run_cli(std::string("run --backend gpu --dtype ") + dtype + " --fp8-scale per_row");
    EXPECT_EQ(bad_scale.exit_code, 2) << bad_scale.output;
    EXPECT_NE(bad_scale.output.find("--fp8-scale"), std::string::npos) << bad_scale.output;
  }
  if (!jit::gpu_unavailable_reason().empty()) {
    const CliResult gpu = run_cli("run --backend gpu --validate" + fp8);
    EXPECT_EQ(gpu.exit_code, 2) << gpu.output;
    EXPECT_NE(gpu.output.find("GPU backend unavailable"), std::string::npos) << gpu.output;
  }
}

// Append-KV writes k_new/v_new behind each sequence's cached keys; the attention that follows
// equals a plain forward over the appended caches.
TEST(CliRun, AppendKvFillsTheCachesThenAttendsOverThem) {
  const fs::path dir = fresh_dir();
  const std::string shape = "-b 2 --seqlen-q 3 --seqlen-k 12 --nhead-q 2 --hdim-q 8 --dtype fp32 ";
  const CliResult append = run_cli("run --family fwd_appendkv --seqlens-k 5,9 " + shape +
                                   "--causal bottom_right --save " + (dir / "a").string());
  ASSERT_EQ(append.exit_code, 0) << append.output;
  const auto k = floats(io::read_npy(dir / "a" / "k.npy"));
  const auto k_new = floats(io::read_npy(dir / "a" / "k_new.npy"));
  const auto k_appended = floats(io::read_npy(dir / "a" / "k_appended.npy"));
  EXPECT_EQ(io::read_npy(dir / "a" / "k_new.npy").shape, (Shape{2, 3, 2, 8}));
  ASSERT_EQ(k_appended.size(), 2u * 12 * 2 * 8);
  const int cached[2] = {5, 9};
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < 12; ++j) {
      for (int e = 0; e < 16; ++e) {  // both heads, all dims of key j
        const size_t at = (b * 12 + j) * 16 + e;
        const bool appended = j >= cached[b] && j < cached[b] + 3;
        const float expected = appended ? k_new[(b * 3 + j - cached[b]) * 16 + e] : k[at];
        EXPECT_EQ(k_appended[at], expected) << "b " << b << " key " << j;
      }
    }
  }

  fs::create_directories(dir / "b");
  fs::copy_file(dir / "a" / "q.npy", dir / "b" / "q.npy");
  fs::copy_file(dir / "a" / "k_appended.npy", dir / "b" / "k.npy");
  fs::copy_file(dir / "a" / "v_appended.npy", dir / "b" / "v.npy");
  const CliResult attend =
      run_cli("run --seqlens-k 8,12 " + shape + "--causal bottom_right " + "--load " +
              (dir / "b").string() + " --save " + (dir / "c").string());
  ASSERT_EQ(attend.exit_code, 0) << attend.output;
  EXPECT_EQ(file_bytes(dir / "a" / "o.npy"), file_bytes(dir / "c" / "o.npy"));
}

// A quantizing append (--fp8-scale per_page into an fp8 pool): bf16 new tokens, the pools'
// page scales saved before and after, no attention (no o.npy); --load reproduces the bytes; and
// the flags that do not make a quantizing append are refused naming --new-dtype.
TEST(CliRun, QuantizingAppendSavesThePageScalesAndReloads) {
  const fs::path dir = fresh_dir();
  const std::string flags =
      "run --family fwd_appendkv --dtype fp8_e4m3 --fp8-scale per_page --page-table vllm "
      "--page-size 16 -b 2 "
      "--nhead-q 4 --nhead-k 2 --seqlen-q 5 --seqlen-k 60 --hdim-q 64 --rope half_rotated ";
  const CliResult first = run_cli(flags + "--save " + (dir / "a").string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("k_page_descale sum="), std::string::npos) << first.output;
  EXPECT_FALSE(fs::exists(dir / "a" / "o.npy"));
  const io::NpyArray before = io::read_npy(dir / "a" / "k_page_descale.npy");
  const io::NpyArray after = io::read_npy(dir / "a" / "k_page_descale_appended.npy");
  ASSERT_EQ(before.shape.size(), 2u);
  EXPECT_EQ(before.shape[1], 2);
  EXPECT_EQ(after.shape, before.shape);
  EXPECT_NE(floats(before), floats(after)) << "the append set some pages' scales";
  const CliResult again =
      run_cli(flags + "--load " + (dir / "a").string() + " --save " + (dir / "b").string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  for (const char* name : {"k_appended.npy", "v_appended.npy", "k_page_descale_appended.npy",
                           "v_page_descale_appended.npy"})
    EXPECT_EQ(file_bytes(dir / "a" / name), file_bytes(dir / "b" / name)) << name;
  // fp16 new tokens are a flag away; without per-page scales --new-dtype means nothing.
  EXPECT_EQ(run_cli(flags + "--new-dtype fp16").exit_code, 0);
  const CliResult plain = run_cli("run --family fwd_appendkv --new-dtype fp16");
  EXPECT_EQ(plain.exit_code, 2);
  EXPECT_NE(plain.output.find("--new-dtype fp16 applies to"), std::string::npos) << plain.output;
}

TEST(CliRun, SavingOverAnEarlierRunReplacesItsContractFilesOnly) {
  const fs::path dir = fresh_dir();
  ASSERT_EQ(run_cli("run --mode group --seqlens-q 4,4 --hdim-q 32 --lse --save " + dir.string())
                .exit_code,
            0);
  std::ofstream(dir / "notes.txt") << "mine";
  ASSERT_EQ(run_cli("run --seqlen-q 4 --hdim-q 32 --save " + dir.string()).exit_code, 0);
  EXPECT_FALSE(fs::exists(dir / "seqstart_q.npy")) << "a stale seqstart would turn on group mode";
  EXPECT_FALSE(fs::exists(dir / "lse.npy"));
  EXPECT_EQ(file_bytes(dir / "notes.txt"), "mine");
  EXPECT_EQ(io::read_npy(dir / "q.npy").shape, (Shape{1, 4, 8, 32}));
}

}  // namespace
}  // namespace tilefmha
