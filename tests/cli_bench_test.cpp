// `tilefmha bench` on the CPU: the sweep file (bench/fa3_sweep.json and hand-written ones),
// shape expansion, FLOP counts and anchors through --list-shapes, bad input (exit 2), and a
// clear failure without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "jit/cuda_driver.hpp"
#include "support/run_cli.hpp"
#include "support/scratch_dirs.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

const fs::path kRepoSweep = fs::path(TILEFMHA_DATA_DIR) / ".." / "bench" / "fa3_sweep.json";

fs::path fresh_dir() {
  return testing::fresh_test_dir("cli_bench_test");
}

fs::path write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// A small sweep: 4096 tokens, hidden 512, one anchor row.
std::string small_sweep(const std::string& extra = "") {
  return R"({"description": "test", "protocol": {"total_tokens": 4096, "hidden": 512},
    "dtype": "bf16", "hdim": [64, 128], "seqlen": [1024, 4096], "causal": [false, true],
    "anchors": {"source": "made up", "card": "test card", "dtype": "bf16", "unit": "TFLOP/s",
      "columns": ["seqlen", "hdim", "causal", "cudnn", "fa2"],
      "rows": [[1024, 128, true, 321, 123]]})" +
         extra + "}";
}

struct ListedShape {
  long long hdim, seqlen, batch, heads;
  bool causal;
  double gflop;
  std::string fa2, cudnn;
};

std::vector<ListedShape> listed_shapes(const std::string& output) {
  const std::regex row(
      R"(\n +(\d+) +(\d+) +(yes|no) +(\d+) +(\d+) +(\w+) +([0-9.]+) +(\S+) +(\S+)(?=\n))");
  std::vector<ListedShape> shapes;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row);
       it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    shapes.push_back({std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[4]), std::stoll(m[5]),
                      m[3] == "yes", std::stod(m[7]), m[8], m[9]});
  }
  return shapes;
}

TEST(CliBench, RepoSweepIsTheFa3ProtocolWithAnAnchorPerShape) {
  const CliResult result = run_cli("bench --list-shapes --sweep " + kRepoSweep.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto shapes = listed_shapes(result.output);
  ASSERT_EQ(shapes.size(), 36u) << result.output;  // 3 head dims x 6 lengths x causal both
  for (const ListedShape& s : shapes) {
    EXPECT_EQ(s.heads * s.hdim, 2048) << "hidden 2048";
    EXPECT_EQ(s.batch * s.seqlen, 16384) << "16k tokens";
    EXPECT_NE(s.fa2, "-") << s.hdim << " " << s.seqlen;
    EXPECT_NE(s.cudnn, "-") << s.hdim << " " << s.seqlen;
    // cuDNN beat FlashAttention-2 on every shape of the measured table.
    EXPECT_GT(std::stod(s.cudnn), std::stod(s.fa2));
  }
  EXPECT_NE(result.output.find("36 shapes"), std::string::npos);
}

TEST(CliBench, ShapesFlopsAndAnchorsFollowTheSweepFile) {
  const fs::path sweep = write_file(fresh_dir() / "sweep.json", small_sweep());
  const CliResult result = run_cli("bench --list-shapes --sweep " + sweep.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto shapes = listed_shapes(result.output);
  ASSERT_EQ(shapes.size(), 8u) << result.output;
  // Order: hdim, then seqlen, then non-causal before causal.
  EXPECT_EQ(shapes[0].hdim, 64);
  EXPECT_EQ(shapes[0].seqlen, 1024);
  EXPECT_FALSE(shapes[0].causal);
  EXPECT_TRUE(shapes[1].causal);
  EXPECT_EQ(shapes[2].seqlen, 4096);
  EXPECT_EQ(shapes[4].hdim, 128);
  for (const ListedShape& s : shapes) {
    EXPECT_EQ(s.heads, 512 / s.hdim);
    EXPECT_EQ(s.batch, 4096 / s.seqlen);
    const double flops = 4.0 * s.batch * s.heads * s.seqlen * s.seqlen * s.hdim;
    EXPECT_NEAR(s.gflop, (s.causal ? flops / 2 : flops) / 1e9, 0.051) << s.hdim << " " << s.seqlen;
    const bool anchored = s.hdim == 128 && s.seqlen == 1024 && s.causal;
    // Columns were given in another order in the file: fa2 123, cudnn 321.
    EXPECT_EQ(s.fa2, anchored ? "123" : "-");
    EXPECT_EQ(s.cudnn, anchored ? "321" : "-");
  }
}

TEST(CliBench, CommandLineNarrowsTheSweep) {
  const fs::path sweep = write_file(fresh_dir() / "sweep.json", small_sweep());
  const CliResult result = run_cli("bench --list-shapes --sweep " + sweep.string() +
                                   " --hdim 128 --seqlen 512,2048 --causal yes --dtype fp16");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto shapes = listed_shapes(result.output);
  ASSERT_EQ(shapes.size(), 2u) << result.output;
  EXPECT_EQ(shapes[0].seqlen, 512);
  EXPECT_EQ(shapes[0].batch, 8);
  EXPECT_EQ(shapes[1].seqlen, 2048);
  EXPECT_TRUE(shapes[0].causal && shapes[1].causal);
  EXPECT_NE(result.output.find("fp16"), std::string::npos);
  // Anchors are bf16 measurements: none for fp16 shapes.
  EXPECT_EQ(shapes[0].cudnn, "-");

  const CliResult no = run_cli("bench --list-shapes --sweep " + sweep.string() + " --causal no");
  EXPECT_EQ(listed_shapes(no.output).size(), 4u);
  for (const auto& s : listed_shapes(no.output)) EXPECT_FALSE(s.causal);
}

// FP8 shapes are the same FA3 shapes with e4m3 inputs: the same FLOPs (TFLOP/s compare with
// the 16-bit rows), no anchors (they are bf16 measurements). --dtype or the sweep file's dtype.
TEST(CliBench, Fp8ShapesKeepTheProtocolAndItsFlops) {
  const fs::path dir = fresh_dir();
  const fs::path sweep = write_file(dir / "sweep.json", small_sweep());
  const CliResult bf16 = run_cli("bench --list-shapes --sweep " + sweep.string());
  const CliResult fp8 =
      run_cli("bench --list-shapes --dtype fp8_e4m3 --sweep " + sweep.string() + " --verify");
  ASSERT_EQ(fp8.exit_code, 0) << fp8.output;
  const auto bf16_shapes = listed_shapes(bf16.output);
  const auto fp8_shapes = listed_shapes(fp8.output);
  ASSERT_EQ(fp8_shapes.size(), bf16_shapes.size()) << fp8.output;
  for (size_t i = 0; i < fp8_shapes.size(); ++i) {
    EXPECT_EQ(fp8_shapes[i].batch, bf16_shapes[i].batch);
    EXPECT_EQ(fp8_shapes[i].heads, bf16_shapes[i].heads);
    EXPECT_DOUBLE_EQ(fp8_shapes[i].gflop, bf16_shapes[i].gflop);
    EXPECT_EQ(fp8_shapes[i].cudnn, "-");
    EXPECT_EQ(fp8_shapes[i].fa2, "-");
  }
  EXPECT_NE(fp8.output.find("fp8_e4m3"), std::string::npos) << fp8.output;

  std::string fp8_file = small_sweep();
  fp8_file.replace(fp8_file.find(R"("dtype": "bf16", "hdim")"), 15, R"("dtype": "fp8_e4m3")");
  const fs::path fp8_sweep = write_file(dir / "fp8_sweep.json", fp8_file);
  const CliResult from_file = run_cli("bench --list-shapes --sweep " + fp8_sweep.string());
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_EQ(listed_shapes(from_file.output).size(), 8u) << from_file.output;
  EXPECT_NE(from_file.output.find("fp8_e4m3"), std::string::npos) << from_file.output;
}

TEST(CliBench, BadSweepsAndFlagsExitTwoNamingTheProblem) {
  const fs::path dir = fresh_dir();
  const std::string good = write_file(dir / "good.json", small_sweep()).string();
  const auto sweep = [&](const std::string& name, const std::string& text) {
    return write_file(dir / name, text).string();
  };
  std::string misspelled = small_sweep(R"(, "seqlens": [1])");
  std::string bad_anchor = small_sweep();
  bad_anchor.replace(bad_anchor.find("[[1024"), 6, "[[-1");
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {"--sweep " + sweep("unknown_key.json", misspelled), "unknown key 'seqlens'"},
      {"--sweep " + sweep("bad_anchor.json", bad_anchor), "rows[0]"},
      {"--sweep " + sweep("not_json.json", "{"), "not_json.json"},
      {"--sweep " + (dir / "missing.json").string(), "missing.json"},
      {"--sweep " + good + " --hdim 96", "hdim 96 does not divide"},
      {"--sweep " + good + " --seqlen 0", "seqlen 0"},
      {"--sweep " + good + " --causal maybe", "maybe"},
      {"--sweep " + good + " --dtype fp8_e5m2", "hold no fp8_e5m2 kernel"},
      {"--sweep " + good + " --dtype fp32", "runs bf16, fp16 or fp8_e4m3"},
      {"--sweep " + good + " --dtype float", "float"},
      {"--sweep " + good + " --repeat 0", "repeat = 0"},
      {"--sweep " + good + " --warmup -1", "warmup = -1"},
      {"--sweep " + good + " --workers -3", "--workers -3"},
      {"--sweep " + good + " --csv /no/such/dir/out.csv", "/no/such/dir"},
      {"--hdim 64", "--sweep is required"},
  };
  for (const auto& c : cases) {
    const CliResult result = run_cli("bench " + c.flags);
    EXPECT_EQ(result.exit_code, 2) << c.flags << "\n" << result.output;
    EXPECT_NE(result.output.find(c.message), std::string::npos) << c.flags << "\n" << result.output;
  }
}

TEST(CliBench, WithoutAGpuFailsClearlyAndWritesNothing) {
  if (jit::gpu_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is present";
  const fs::path dir = fresh_dir();
  const CliResult result =
      run_cli("bench --sweep " + kRepoSweep.string() + " --hdim 128 --seqlen 2048 --csv " +
              (dir / "out.csv").string() + " --json " + (dir / "out.json").string());
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.exit_code, -1) << "crashed: " << result.output;
  EXPECT_NE(result.output.find("bench needs a GPU"), std::string::npos) << result.output;
  EXPECT_FALSE(fs::exists(dir / "out.csv"));
  EXPECT_FALSE(fs::exists(dir / "out.json"));

  const CliResult fp8 = run_cli("bench --sweep " + kRepoSweep.string() +
                                " --dtype fp8_e4m3 --verify --hdim 128 --seqlen 2048");
  EXPECT_EQ(fp8.exit_code, 1) << fp8.output;
  EXPECT_NE(fp8.output.find("bench needs a GPU"), std::string::npos) << fp8.output;
}

}  // namespace
}  // namespace tilefmha
