// `tilefmha list`: the report, --list, --json, filters, and errors mapped to exit code 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "enumerate/data_dir.hpp"
#include "enumerate/list_report.hpp"
#include "tilefmha/error.hpp"

using namespace tilefmha;
using namespace tilefmha::enumerate;

namespace {

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("tilefmha_list_test_" + std::to_string(::getpid()) + "_" + name);
}

ListOptions fwd_ci() {
  ListOptions options;
  options.config = "fwd_ci";
  return options;
}

std::string report(const ListOptions& options) {
  std::ostringstream out;
  run_list(options, out);
  return out.str();
}

}  // namespace

TEST(ListReport, CountsPerFamilyTotalAndTime) {
  const std::string text = report(fwd_ci());
  EXPECT_NE(text.find("sweep config fwd_ci (variant fwd), arch sm90, profile full"),
            std::string::npos)
      << text;
  // sm90_ws 16 (hdim 64 in three tiles, hdim 128 in one) and its sm80_mma fallback 8.
  EXPECT_NE(text.find("  fwd                   24\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  total                 24\n"), std::string::npos) << text;
  EXPECT_NE(text.find("enumerated in "), std::string::npos) << text;
  EXPECT_EQ(text.find("fwd.sm90."), std::string::npos) << "names without --list";
}

TEST(ListReport, CountOnlyPrintsTheTotal) {
  ListOptions options = fwd_ci();
  options.count_only = true;
  EXPECT_EQ(report(options), "24\n");
  options.profile = "ci";
  EXPECT_EQ(report(options), "2\n");
  // sm80: fp16/bf16 x (hdim 64: 128x128, hdim 128: 128x64) x (no mask, causal).
  options.arch = Arch::sm80;
  options.profile = "full";
  EXPECT_EQ(report(options), "8\n");
}

TEST(ListReport, ListPrintsCanonicalNames) {
  ListOptions options = fwd_ci();
  options.list = true;
  const std::string text = report(options);
  std::istringstream lines(text);
  std::string line;
  int names = 0;
  while (std::getline(lines, line))
    if (line.starts_with("fwd.")) {
      EXPECT_EQ(KernelConfig::parse_name(line).name(), line);
      ++names;
    }
  EXPECT_EQ(names, 24);
}

TEST(ListReport, FiltersAndFilterFilesAllMustHold) {
  ListOptions options = fwd_ci();
  options.count_only = true;
  options.filters = {"c.dtype == 'bf16'"};
  EXPECT_EQ(report(options), "12\n");
  options.filters.push_back("c.mask == 'causal'");
  EXPECT_EQ(report(options), "6\n");
  const auto file = temp_file("filters.txt");
  std::ofstream(file) << "# only head dim 64\nc.hdim_q == 64\n";
  options.filter_files = {file.string()};
  EXPECT_EQ(report(options), "4\n");
  std::filesystem::remove(file);
}

TEST(ListReport, JsonWritesTheConfigs) {
  ListOptions options = fwd_ci();
  options.json_path = temp_file("out.json");
  std::ostringstream out;
  const Enumeration result = run_list(options, out);
  const nlohmann::json array = read_json_file(options.json_path);
  ASSERT_TRUE(array.is_array());
  ASSERT_EQ(array.size(), result.configs.size());
  for (size_t i = 0; i < array.size(); ++i)
    EXPECT_EQ(array[i].get<KernelConfig>(), result.configs[i]);
  std::filesystem::remove(options.json_path);
}

TEST(ListReport, ConfigByPathWithBothSections) {
  const auto path = temp_file("config.json");
  std::ofstream(path) << R"({"variant": "bwd",
    "trait_config": {"dtype": {"values": ["fp16"]}, "hdim_q": {"values": [64]}},
    "tile_config": {"warps": {"values": [4]}}})";
  ListOptions options;
  options.config = path.string();
  options.list = true;
  const std::string text = report(options);
  EXPECT_NE(text.find("bwd_dot_do_o.sm90.fp16"), std::string::npos) << text;
  EXPECT_NE(text.find("bwd_convert_dq.sm90.fp16"), std::string::npos) << text;
  // The dQ/dK/dV tiles of hdim 64 have 8 or 12 warps: none survive warps == 4.
  EXPECT_EQ(text.find("bwd_dq_dk_dv.sm90"), std::string::npos) << text;
  EXPECT_NE(text.find("  bwd_dq_dk_dv          0\n"), std::string::npos) << text;
  std::filesystem::remove(path);
}

TEST(ListReport, BadInputsAreInvalidArgumentErrors) {
  auto kind_of = [](ListOptions options) {
    try {
      report(options);
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::runtime;  // no error
  };
  ListOptions options = fwd_ci();
  options.profile = "nope";
  EXPECT_EQ(kind_of(options), ErrorKind::invalid_argument);
  options = fwd_ci();
  options.config = "nope";
  EXPECT_EQ(kind_of(options), ErrorKind::invalid_argument);
  options = fwd_ci();
  options.filters = {"c.hdim_q = 1"};
  EXPECT_EQ(kind_of(options), ErrorKind::invalid_argument);
  options = fwd_ci();
  options.count_only = options.list = true;
  EXPECT_EQ(kind_of(options), ErrorKind::invalid_argument);
  options = fwd_ci();
  options.filter_files = {"/nonexistent/filters.txt"};
  EXPECT_EQ(kind_of(options), ErrorKind::io);
}

TEST(ListCli, BadInputExitsWithUsageCode) {
  const std::filesystem::path cli = TILEFMHA_CLI_PATH;
  if (!std::filesystem::exists(cli)) GTEST_SKIP() << "CLI not built: " << cli;
  auto exit_code = [&](const std::string& args) {
    const std::string command = cli.string() + " list " + args + " >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(exit_code("fwd_ci --count-only"), 0);
  // A positional after --filter is the config, not a second expression.
  EXPECT_EQ(exit_code("--filter c.lse --filter \"c.hdim_q == 64\" fwd_ci --count-only"), 0);
  EXPECT_EQ(exit_code("fwd_ci --filter \"c.nope == 1\""), 2);
  EXPECT_EQ(exit_code("no_such_config"), 2);
  EXPECT_EQ(exit_code("fwd_ci --arch sm99"), 2);
  EXPECT_EQ(exit_code("fwd_ci --profile nope"), 2);
}
