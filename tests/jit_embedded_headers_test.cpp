// The kernel headers embedded at build time: complete, current, and NVRTC-compatible.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "jit/embedded_headers.hpp"

namespace tilefmha::jit {
namespace {

namespace fs = std::filesystem;

// tests/<this file> -> <repo>/kernels
fs::path kernels_source_dir() {
  return fs::path(__FILE__).parent_path().parent_path() / "kernels";
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

TEST(JitEmbeddedHeaders, TableIsSortedAndUnique) {
  const auto files = embedded_kernel_files();
  ASSERT_FALSE(files.empty());
  for (size_t i = 1; i < files.size(); ++i) EXPECT_LT(files[i - 1].path, files[i].path);
}

TEST(JitEmbeddedHeaders, MatchesTheSourceTreeExactly) {
  const fs::path root = kernels_source_dir();
  ASSERT_TRUE(fs::is_directory(root)) << root;
  std::set<std::string> on_disk;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const std::string relative = fs::relative(entry.path(), root).generic_string();
    on_disk.insert(relative);
    const EmbeddedFile* embedded = find_embedded_kernel_file(relative);
    ASSERT_NE(embedded, nullptr) << relative << " is not embedded (stale build?)";
    // Compared as a flag: printing two whole headers would bury the file name.
    EXPECT_TRUE(embedded->contents == read_text(entry.path()))
        << relative << " differs from its embedded copy (stale build?)";
  }
  for (const EmbeddedFile& file : embedded_kernel_files()) {
    EXPECT_EQ(on_disk.count(std::string(file.path)), 1u) << file.path << " no longer exists";
  }
  EXPECT_NE(find_embedded_kernel_file("tile/mma.h"), nullptr);
  EXPECT_NE(find_embedded_kernel_file("common/philox.h"), nullptr);
  EXPECT_EQ(find_embedded_kernel_file("tile/nope.h"), nullptr);
}

TEST(JitEmbeddedHeaders, HeadersFollowTheNvrtcRules) {
  // NVRTC compiles them with no include path: only sibling kernels/ headers may be included,
  // by their kernels/-relative path, and each header guards itself.
  for (const EmbeddedFile& file : embedded_kernel_files()) {
    if (!file.path.ends_with(".h") && !file.path.ends_with(".cuh")) continue;
    const std::string contents(file.contents);
    EXPECT_NE(contents.find("#pragma once"), std::string::npos) << file.path;
    EXPECT_EQ(contents.find("#include <"), std::string::npos) << file.path << " uses a std header";
    for (size_t at = contents.find("#include \""); at != std::string::npos;
         at = contents.find("#include \"", at + 1)) {
      const size_t begin = at + 10;
      const std::string included = contents.substr(begin, contents.find('"', begin) - begin);
      EXPECT_NE(find_embedded_kernel_file(included), nullptr)
          << file.path << " includes " << included << ", which is not a kernels/ path";
    }
  }
}

TEST(JitEmbeddedHeaders, HashIsStableAndCoversContents) {
  const std::string& hash = embedded_kernel_files_hash();
  EXPECT_EQ(hash.size(), 32u);
  EXPECT_EQ(&embedded_kernel_files_hash(), &hash);
  EXPECT_EQ(embedded_kernel_files_hash(), hash);
}

}  // namespace
}  // namespace tilefmha::jit
