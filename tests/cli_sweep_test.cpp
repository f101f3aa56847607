// `tilefmha sweep --compile-only` end to end on the CPU: two kernels built, every fwd shape of
// the smoke tier either matched or reported unserved with a reason, every serving (paged) shape
// matched on sm90, bad flags exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "bench/matrix.hpp"
#include "jit/cuda_driver.hpp"
#include "support/run_cli.hpp"
#include "support/scratch_dirs.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

// Two sm80 bf16 head-dim-128 kernels (with and without causal mask): seconds of NVRTC.
const std::string kFilter =
    "--filter \"c.dtype == 'bf16' and c.hdim_q == 128 and c.pipeline == 'sm80_mma'\"";

TEST(CliSweep, CompileOnlyWritesMatchesAndUnservedRows) {
  const fs::path dir = testing::fresh_test_dir("cli_sweep_test") / "ok";
  fs::create_directories(dir);
  const CliResult result = run_cli(
      "sweep --compile-only --category smoke --variant fwd --max-kernels 2 --arch sm80 "
      "--no-progress " +
      kFilter + " --cache-dir " + (dir / "cache").string() + " --csv " + (dir / "m.csv").string() +
      " --json " + (dir / "m.json").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;

  std::ifstream json_file(dir / "m.json");
  const nlohmann::json root = nlohmann::json::parse(json_file);
  EXPECT_EQ(root["kernels_built"], 2);
  size_t fwd_shapes = 0;
  for (const auto& s : bench::load_matrix_tier("smoke")) fwd_shapes += s.family == Family::fwd;

  std::set<std::string> shapes_seen;
  size_t matches = 0, unserved = 0;
  for (const nlohmann::json& row : root["rows"]) {
    shapes_seen.insert(row["group"].get<std::string>() + row["shape"].get<std::string>());
    EXPECT_EQ(row["problem_family"], "fwd");
    if (row["status"] == "match") {
      ++matches;
      // A match carries the kernel's every field, consistent with the shape.
      EXPECT_EQ(row["family"], "fwd");
      EXPECT_EQ(row["dtype"], row["problem_dtype"]);
      EXPECT_GE(row["hdim_q"].get<int64_t>(), row["problem_hdim_q"].get<int64_t>());
      EXPECT_EQ(row["mask"], row["problem_mask"]);
    } else {
      ASSERT_EQ(row["status"], "unserved");
      ++unserved;
      EXPECT_FALSE(row["reason"].get<std::string>().empty());
      EXPECT_TRUE(row["kernel_name"].is_null());
    }
  }
  // Every shape appears (none dropped), some served, some (fp16, hdim 64, ...) not.
  EXPECT_EQ(shapes_seen.size(), fwd_shapes);
  EXPECT_GT(matches, 0u);
  EXPECT_GT(unserved, 0u);

  std::ifstream csv(dir / "m.csv");
  std::string header, line;
  std::getline(csv, header);
  for (const char* column : {"problem_seqlen_q", "status", "reason", "block_m", "pad_seqlen_k",
                             "dbias", "median_ms", "tflops", "gbps", "card", "driver"})
    EXPECT_NE(header.find(column), std::string::npos) << column;
  size_t lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, root["rows"].size());
}

// The serving variants on sm90 through the portable sm80_mma paged kernels (any page size):
// every pagedkv and batch_prefill shape of the smoke tier is served, by kernels of both KV
// layouts (the matrix has no layout axis), each row's kernel of the shape's table form.
// "(c.<field> == 'a' or c.<field> == 'b')" over the values the tier's shapes of `family` need,
// so the test builds only the kernels those shapes can use (about six, seconds of NVRTC each).
template <class Of>
std::string any_of(const std::string& field, Family family, Of value_of) {
  std::set<std::string> values;
  for (const auto& shape : bench::load_matrix_tier("smoke"))
    if (shape.family == family) values.insert(value_of(shape));
  std::string clause;
  for (const std::string& value : values)
    clause += (clause.empty() ? "(" : " or ") + ("c." + field + " == '" + value + "'");
  return clause + ")";
}

TEST(CliSweep, CompileOnlyServesEveryPagedShapeOnSm90) {
  const fs::path dir = testing::fresh_test_dir("cli_sweep_test") / "paged";
  fs::create_directories(dir);
  for (const auto& [variant, family] : {std::pair{"pagedkv", Family::fwd_pagedkv},
                                        std::pair{"batch_prefill", Family::batch_prefill}}) {
    const std::string filter =
        "--filter \"c.pipeline == 'sm80_mma' and c.hdim_q == 128 and c.page_size == 0 and "
        "c.pad_seqlen_k and not c.pad_hdim_q and not c.lse and not c.softcap and not "
        "c.sink_logit and not c.dropout and c.bias == 'none' and " +
        any_of("dtype", family, [](const auto& s) { return std::string(to_string(s.dtype)); }) +
        " and " +
        any_of("mode", family, [](const auto& s) { return std::string(to_string(s.mode())); }) +
        " and " +
        any_of("mask", family, [](const auto& s) { return std::string(to_string(s.mask)); }) +
        " and " +
        any_of("page_table", family,
               [](const auto& s) { return std::string(to_string(s.page_table)); }) +
        "\"";
    const fs::path json = dir / (std::string(variant) + ".json");
    const CliResult result =
        run_cli(std::string("sweep --compile-only --category smoke --variant ") + variant +
                " --arch sm90 --no-progress " + filter + " --cache-dir " +
                (dir / "cache").string() + " --json " + json.string());
    ASSERT_EQ(result.exit_code, 0) << result.output;
    std::ifstream json_file(json);
    const nlohmann::json root = nlohmann::json::parse(json_file);
    EXPECT_EQ(root["validated"], false) << "compile-only runs nothing to validate";

    std::map<std::string, std::set<std::string>> layouts_by_shape;
    for (const nlohmann::json& row : root["rows"]) {
      ASSERT_EQ(row["status"], "match") << row["shape"] << ": " << row["reason"];
      EXPECT_EQ(row["pipeline"], "sm80_mma");
      EXPECT_EQ(row["family"], row["problem_family"]);
      EXPECT_EQ(row["page_table"], row["problem_page_table"]);
      layouts_by_shape[row["shape"].get<std::string>()].insert(row["kv_layout"].get<std::string>());
    }
    size_t shapes = 0;
    for (const auto& s : bench::load_matrix_tier("smoke")) {
      if (s.family != family) continue;
      ++shapes;
      EXPECT_EQ(layouts_by_shape[s.label()], (std::set<std::string>{"hnd", "nhd"})) << s.label();
    }
    EXPECT_GT(shapes, 0u);
    EXPECT_EQ(layouts_by_shape.size(), shapes);
  }
}

// With no kernel at all every shape of the variant is still reported, each unserved.
TEST(CliSweep, NoKernelLeavesEveryShapeUnserved) {
  const fs::path dir = testing::fresh_test_dir("cli_sweep_test") / "none";
  fs::create_directories(dir);
  const CliResult result = run_cli(
      "sweep --compile-only --category smoke --variant pagedkv --no-progress "
      "--filter \"c.hdim_q == 4096\" --json " +
      (dir / "p.json").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream json_file(dir / "p.json");
  const nlohmann::json root = nlohmann::json::parse(json_file);
  size_t paged_shapes = 0;
  for (const auto& s : bench::load_matrix_tier("smoke"))
    paged_shapes += s.family == Family::fwd_pagedkv;
  ASSERT_GT(paged_shapes, 0u);
  ASSERT_EQ(root["rows"].size(), paged_shapes);
  for (const nlohmann::json& row : root["rows"]) {
    EXPECT_EQ(row["status"], "unserved");
    EXPECT_EQ(row["reason"], "no built kernel of family fwd_pagedkv");
  }
}

TEST(CliSweep, TimingWithoutAGpuSaysToCompileOnly) {
  if (jit::gpu_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is present";
  const CliResult result = run_cli("sweep --category smoke --variant fwd --no-progress");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("--compile-only"), std::string::npos) << result.output;
}

TEST(CliSweep, BadFlagsExitTwo) {
  const fs::path dir = testing::fresh_test_dir("cli_sweep_test") / "bad";
  fs::create_directories(dir);
  for (const std::string& flags :
       {std::string("sweep --compile-only --category weekly --variant fwd"),
        std::string("sweep --compile-only --category smoke --variant fwdd"),
        std::string("sweep --compile-only --category smoke"),
        std::string("sweep --compile-only --category smoke --variant fwd --max-kernels -1"),
        std::string("sweep --compile-only --category smoke --variant fwd --arch sm70"),
        std::string("sweep --compile-only --category smoke --variant fwd --filter \"c.nope == 1\""),
        // Validation compares GPU output, which compile-only never produces.
        std::string("sweep --compile-only --validate --category smoke --variant pagedkv"),
        std::string("sweep --validate --no-validate --category smoke --variant pagedkv"),
        "sweep --compile-only --category smoke --variant fwd --csv " +
            (dir / "missing" / "m.csv").string()}) {
    const CliResult result = run_cli(flags);
    EXPECT_EQ(result.exit_code, 2) << flags << "\n" << result.output;
  }
}

}  // namespace
}  // namespace tilefmha
