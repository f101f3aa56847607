// data/ embedded into the library (cmake/EmbedData.cmake): the embedded copy matches the source
// tree byte for byte, loads the same arch specs, profiles, sweep configs and matrices, and
// data_dir() picks $TILEFMHA_DATA_DIR, then the source tree's data/, then the embedded copy.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <string>

#include "bench/matrix.hpp"
#include "enumerate/arch_spec.hpp"
#include "enumerate/data_dir.hpp"
#include "enumerate/enumerator.hpp"
#include "enumerate/profile.hpp"
#include "enumerate/sweep_config.hpp"
#include "support/scratch_dirs.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceData = TILEFMHA_DATA_DIR;

// Sets (or, with nullopt, unsets) $TILEFMHA_DATA_DIR and the embedded override for one scope,
// then restores both.
class DataSourceScope {
 public:
  DataSourceScope(std::optional<std::string> env, bool embedded) {
    if (const char* old = std::getenv("TILEFMHA_DATA_DIR")) saved_ = old;
    if (env)
      ::setenv("TILEFMHA_DATA_DIR", env->c_str(), 1);
    else
      ::unsetenv("TILEFMHA_DATA_DIR");
    force_embedded_data(embedded);
  }
  ~DataSourceScope() {
    force_embedded_data(false);
    if (saved_)
      ::setenv("TILEFMHA_DATA_DIR", saved_->c_str(), 1);
    else
      ::unsetenv("TILEFMHA_DATA_DIR");
  }
  DataSourceScope(const DataSourceScope&) = delete;
  DataSourceScope& operator=(const DataSourceScope&) = delete;

 private:
  std::optional<std::string> saved_;
};

// Every *.json file under the source tree's data/, relative to it.
std::set<std::string> source_json_files() {
  std::set<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(kSourceData))
    if (entry.is_regular_file() && entry.path().extension() == ".json")
      out.insert(entry.path().lexically_relative(kSourceData).generic_string());
  return out;
}

// What one data source yields: the enumeration of an arch under a sweep config and a profile,
// and the names the loaders list.
struct Loaded {
  enumerate::ArchSpec spec;
  enumerate::Profile profile;
  std::vector<KernelConfig> configs;
  std::vector<std::string> profiles, sweep_configs, matrix_labels;
};

Loaded load_everything(Arch arch, const std::string& profile, const std::string& sweep) {
  Loaded out;
  out.spec = enumerate::load_arch_spec(arch);
  out.profile = enumerate::load_profile(profile);
  out.configs = enumerate::enumerate_kernels(out.spec, enumerate::load_sweep_config(sweep),
                                             out.profile, enumerate::FilterSet{})
                    .configs;
  out.profiles = enumerate::profile_names();
  out.sweep_configs = enumerate::sweep_config_names();
  // "full" and "nightly" include other tiers: the includes resolve inside the same source.
  for (const char* tier : {"smoke", "full", "nightly"})
    for (const bench::MatrixShape& shape : bench::load_matrix_tier(tier))
      out.matrix_labels.push_back(std::string(tier) + ": " + shape.label());
  return out;
}

void expect_same(const Loaded& disk, const Loaded& embedded) {
  EXPECT_EQ(disk.spec.arch, embedded.spec.arch);
  EXPECT_EQ(disk.spec.description, embedded.spec.description);
  EXPECT_EQ(disk.spec.tiles.size(), embedded.spec.tiles.size());
  EXPECT_EQ(disk.spec.page_sizes, embedded.spec.page_sizes);
  EXPECT_EQ(disk.profile.name, embedded.profile.name);
  EXPECT_EQ(disk.profile.description, embedded.profile.description);
  ASSERT_FALSE(disk.configs.empty());
  EXPECT_EQ(disk.configs.size(), embedded.configs.size());
  EXPECT_TRUE(disk.configs == embedded.configs) << "the enumerations differ";
  EXPECT_EQ(disk.profiles, embedded.profiles);
  EXPECT_EQ(disk.sweep_configs, embedded.sweep_configs);
  EXPECT_EQ(disk.matrix_labels, embedded.matrix_labels);
}

TEST(EmbeddedData, HoldsEveryJsonFileOfDataByteForByte) {
  const auto files = embedded_data_files();
  std::set<std::string> embedded;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(files[i - 1].path, files[i].path) << "the table must be sorted";
    }
    embedded.insert(std::string(files[i].path));
    EXPECT_EQ(files[i].contents, read_file_contents(kSourceData / files[i].path)) << files[i].path;
    EXPECT_EQ(find_embedded_data_file(files[i].path), &files[i]);
  }
  EXPECT_EQ(embedded, source_json_files());
  for (const char* expected :
       {"arch/sm90.json", "profiles/full.json", "configs/all.json", "matrix/smoke.json"})
    EXPECT_TRUE(embedded.contains(expected)) << expected;
  EXPECT_EQ(find_embedded_data_file("arch/sm95.json"), nullptr);
}

TEST(EmbeddedData, LoadsTheSameArchSpecsProfilesConfigsAndMatrices) {
  Loaded disk, embedded;
  {
    const DataSourceScope source(std::nullopt, false);
    ASSERT_FALSE(data_dir_is_embedded());
    disk = load_everything(Arch::sm90, "full", "all");
  }
  {
    const DataSourceScope source(std::nullopt, true);
    ASSERT_TRUE(data_dir_is_embedded());
    embedded = load_everything(Arch::sm90, "full", "all");
  }
  expect_same(disk, embedded);
}

TEST(EmbeddedData, EveryArchAndProfileLoadsFromTheEmbeddedCopy) {
  std::vector<std::string> profiles;
  {
    const DataSourceScope source(std::nullopt, false);
    profiles = enumerate::profile_names();
  }
  const DataSourceScope source(std::nullopt, true);
  EXPECT_EQ(enumerate::profile_names(), profiles);
  for (Arch arch : {Arch::sm80, Arch::sm86, Arch::sm89, Arch::sm90})
    EXPECT_EQ(enumerate::load_arch_spec(arch).arch, arch);
  for (const std::string& name : profiles) EXPECT_EQ(enumerate::load_profile(name).name, name);
  for (const std::string& name : enumerate::sweep_config_names())
    EXPECT_EQ(enumerate::load_sweep_config(name).name, name);
  // Unknown names still list the known ones, read from the embedded table.
  try {
    enumerate::load_profile("nonesuch");
    ADD_FAILURE() << "unknown profile loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
  }
  // A path the embedded copy lacks is an io error naming it.
  try {
    read_file_contents(data_dir() / "arch" / "sm95.json");
    ADD_FAILURE() << "missing embedded file read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("embedded:data/arch/sm95.json"), std::string::npos)
        << e.what();
  }
}

TEST(EmbeddedData, SourceTreeIsPreferredOverTheEmbeddedCopy) {
  const DataSourceScope source(std::nullopt, false);
  ASSERT_TRUE(fs::is_directory(kSourceData));
  EXPECT_EQ(data_dir(), kSourceData);
  EXPECT_FALSE(data_dir_is_embedded());
}

// $TILEFMHA_DATA_DIR wins over both copies, with no fallback: an empty directory has no arch
// specs or profiles, and the error names it.
TEST(EmbeddedData, EnvironmentWinsEvenWhenItsDirectoryIsEmpty) {
  const testing::TemporaryDirectory empty("tilefmha_embedded_data_test_");
  const DataSourceScope source(empty.path().string(), false);
  EXPECT_EQ(data_dir(), empty.path());
  EXPECT_FALSE(data_dir_is_embedded());
  EXPECT_TRUE(enumerate::profile_names().empty());
  try {
    enumerate::load_arch_spec(Arch::sm90);
    ADD_FAILURE() << "loaded an arch spec from an empty data dir";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find(empty.path().string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(enumerate::load_profile("full"), Error);
}

// The test override beats the environment too, and lifting it restores the rule.
TEST(EmbeddedData, ForcedEmbeddedCopyBeatsTheEnvironment) {
  const testing::TemporaryDirectory empty("tilefmha_embedded_data_test_");
  const DataSourceScope source(empty.path().string(), true);
  EXPECT_EQ(data_dir(), fs::path(kEmbeddedDataDir));
  EXPECT_EQ(enumerate::load_profile("full").name, "full");
  force_embedded_data(false);
  EXPECT_EQ(data_dir(), empty.path());
}

// Paths outside the embedded root are ordinary files, even when they look alike.
TEST(EmbeddedData, OnlyPathsUnderTheEmbeddedRootAreVirtual) {
  EXPECT_TRUE(is_readable_file(fs::path(kEmbeddedDataDir) / "profiles" / "full.json"));
  EXPECT_TRUE(is_readable_file(fs::path(kEmbeddedDataDir) / "matrix" / ".." / "arch/sm90.json"));
  EXPECT_FALSE(is_readable_file(fs::path(kEmbeddedDataDir) / "profiles"));
  EXPECT_FALSE(is_readable_file("embedded:database/profiles/full.json"));
  EXPECT_FALSE(is_readable_file("embedded:data.json"));
  EXPECT_EQ(json_file_stems(fs::path(kEmbeddedDataDir) / "arch"),
            (std::vector<std::string>{"sm80", "sm86", "sm89", "sm90"}));
  EXPECT_TRUE(json_file_stems(kEmbeddedDataDir).empty());  // no .json directly in data/
  EXPECT_EQ(json_file_stems(kSourceData / "arch"),
            json_file_stems(fs::path(kEmbeddedDataDir) / "arch"));
}

}  // namespace
}  // namespace tilefmha
