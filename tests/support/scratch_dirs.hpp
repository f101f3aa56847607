// Test support: directories a test may fill and throw away.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace tilefmha::testing {

// <gtest TempDir>/<binary_dir>/<running test's name>, emptied and created: left behind for a
// look after a failure, cleared by the next run.
inline std::filesystem::path fresh_test_dir(const std::string& binary_dir) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / binary_dir / info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A new directory under the system's temp dir, named from `prefix`, the process id and a random
// number, removed with its contents when the object goes.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix) {
    std::random_device entropy;
    path_ = std::filesystem::temp_directory_path() /
            (prefix + std::to_string(::getpid()) + "_" + std::to_string(entropy()));
    std::filesystem::create_directories(path_);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tilefmha::testing
