// The CLI's bad-input corpus (tests/data/bad_inputs_cli.json), one table-driven test per
// family: every case is a `tilefmha run` that must be refused with the expected exit code and a
// message naming the field, and must write nothing: its --save target (absent, an existing
// directory or a regular file) and its --load directory are byte for byte as before, and no
// staging directory is left beside the target. The corpus is data; this file only runs it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "support/corpus_files.hpp"
#include "support/run_cli.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliResult;
using testing::run_cli;

const json& corpus() {
  static const json root = [] {
    // tests/data beside the source tree's data/ (TILEFMHA_DATA_DIR).
    std::ifstream in(fs::path(TILEFMHA_DATA_DIR) / ".." / "tests" / "data" / "bad_inputs_cli.json");
    return json::parse(in);
  }();
  return root;
}

const std::string kFamilies[] = {"fwd",          "fwd_splitkv",   "fwd_splitkv_combine",
                                 "fwd_pagedkv",  "batch_prefill", "fwd_appendkv",
                                 "bwd_dot_do_o", "bwd_dq_dk_dv",  "bwd_convert_dq"};

// "{in}" in the arguments becomes the case's --load directory.
std::string substitute(std::string text, const std::string& key, const std::string& value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
  return text;
}

// Builds the named input directory of the corpus under `root` once: a valid run's --save, then
// the edits that make it bad.
fs::path input_dir(const fs::path& root, const std::string& name) {
  const fs::path dir = root / "inputs" / name;
  if (fs::exists(dir)) return dir;
  const json& spec = corpus().at("inputs").at(name);
  const CliResult made =
      run_cli("run --threads 1 " + spec.at("args").get<std::string>() + " --save " + dir.string());
  EXPECT_EQ(made.exit_code, 0) << "input " << name << " did not save:\n" << made.output;
  for (const json& edit : spec.value("edits", json::array())) testing::apply_edit(dir, edit);
  return dir;
}

// The --save target of a case, prepared as its "save" field asks: "new" (absent), "existing"
// (a directory holding a stale o.npy and a file of the user's) or "file" (a regular file).
fs::path save_target(const fs::path& root, const std::string& kind) {
  const fs::path target = root / ("out_" + kind);
  fs::remove_all(target);
  if (kind == "existing") {
    fs::create_directories(target);
    std::ofstream(target / "o.npy") << "stale output";
    std::ofstream(target / "notes.txt") << "the user's file";
  } else if (kind == "file") {
    std::ofstream(target) << "not a directory";
  } else if (kind != "new") {
    ADD_FAILURE() << "unknown save kind " << kind;
  }
  return target;
}

// Staging directories (".<name>.partial-*") left beside the target.
std::set<std::string> leftovers(const fs::path& target) {
  std::set<std::string> found;
  const std::string prefix = "." + target.filename().string() + ".partial-";
  for (const auto& entry : fs::directory_iterator(target.parent_path()))
    if (entry.path().filename().string().rfind(prefix, 0) == 0)
      found.insert(entry.path().filename().string());
  return found;
}

void run_case(const fs::path& root, const json& c, size_t index) {
  const std::string family = c.at("family").get<std::string>();
  std::string args = c.at("args").get<std::string>();
  SCOPED_TRACE("case " + std::to_string(index) + " (" + family + "): " + args);
  fs::path load;
  if (c.contains("load")) {
    load = input_dir(root, c["load"].get<std::string>());
    args = substitute(args, "{in}", load.string());
  }
  // "--family F" is added unless the case spells its own (a bad family name, "bwd").
  if (!c.value("own_family_flag", false)) args = "--family " + family + " " + args;
  const fs::path target = save_target(root, c.value("save", "new"));
  const auto target_before = testing::snapshot_tree(target);
  const auto load_before = testing::snapshot_tree(load.empty() ? root / "none" : load);

  const CliResult result = run_cli("run --threads 1 " + args + " --save " + target.string());

  EXPECT_EQ(result.exit_code, c.at("exit").get<int>()) << result.output;
  const std::string field = c.at("field").get<std::string>();
  EXPECT_NE(result.output.find(field), std::string::npos)
      << "the message does not name " << field << ":\n"
      << result.output;
  const std::string pattern = c.at("message").get<std::string>();
  EXPECT_TRUE(std::regex_search(result.output, std::regex(pattern)))
      << "no match for /" << pattern << "/ in:\n"
      << result.output;
  EXPECT_EQ(testing::snapshot_tree(target), target_before) << "the --save target changed";
  EXPECT_TRUE(leftovers(target).empty()) << "a staging directory was left behind";
  EXPECT_EQ(testing::snapshot_tree(load.empty() ? root / "none" : load), load_before)
      << "the --load directory changed";
}

class CliBadInputCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(CliBadInputCorpus, EveryCaseIsRefusedNamingTheFieldAndWritesNothing) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path root = fs::path(::testing::TempDir()) / "cli_bad_input_corpus_test" / GetParam();
  fs::remove_all(root);
  fs::create_directories(root);
  size_t cases = 0;
  const json& all = corpus().at("cases");
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].at("family") != GetParam()) continue;
    run_case(root, all[i], i);
    ++cases;
  }
  // Every family carries its share of the corpus (issue 15: all nine families).
  EXPECT_GE(cases, 8u) << info->name();
}

INSTANTIATE_TEST_SUITE_P(Families, CliBadInputCorpus, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return info.param; });

TEST(CliBadInputCorpusData, HoldsAtLeast150CasesOfTheNineFamiliesWithKnownFields) {
  const json& all = corpus().at("cases");
  EXPECT_GE(all.size(), 150u);
  const std::set<std::string> families(std::begin(kFamilies), std::end(kFamilies));
  const std::set<std::string> case_keys = {"family", "args", "exit", "field",          "message",
                                           "load",   "save", "note", "own_family_flag"};
  std::set<std::string> seen_args;
  for (const json& c : all) {
    EXPECT_EQ(families.count(c.at("family").get<std::string>()), 1u) << c.dump();
    for (const auto& [key, value] : c.items())
      EXPECT_EQ(case_keys.count(key), 1u) << "unknown key " << key << " in " << c.dump();
    if (c.contains("load")) {
      EXPECT_TRUE(corpus().at("inputs").contains(c["load"])) << c.dump();
    }
    // A refusal exits 2 (bad input) or 1 (unsupported); never 0, never a crash.
    EXPECT_TRUE(c.at("exit") == 2 || c.at("exit") == 1) << c.dump();
    // Two cases with the same flags and input test the same thing.
    const std::string key = c.value("load", "") + " " + c.at("family").get<std::string>() + " " +
                            c.at("args").get<std::string>();
    EXPECT_TRUE(seen_args.insert(key).second) << "duplicate case " << key;
  }
}

}  // namespace
}  // namespace tilefmha
