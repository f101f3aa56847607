#include "run_save.hpp"

#include <algorithm>
#include <cstdio>
#include <random>

#include "run_files.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace fs = std::filesystem;
namespace {

// The target as an absolute path without a trailing separator, so that parent_path() is the
// directory the staging folder must share (rename does not cross file systems).
fs::path normalized(const fs::path& dir) {
  fs::path path = fs::absolute(dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  return path;
}

[[noreturn]] void fail(const fs::path& path, const std::string& what,
                       const std::error_code& error) {
  throw Error(ErrorKind::io,
              "--save " + path.string() + ": " + what + " (" + error.message() + ")");
}

fs::path make_staging_dir(const fs::path& target) {
  std::random_device entropy;
  std::error_code error;
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[16];
    std::snprintf(suffix, sizeof(suffix), "%08x", entropy());
    // Hidden, beside the target, and named after it so that a crash leaves an obvious leftover.
    std::string name = ".";
    name.append(target.filename().string()).append(".partial-").append(suffix);
    const fs::path staging = target.parent_path() / name;
    if (fs::create_directory(staging, error)) return staging;
    if (error) fail(target, "cannot create a staging directory " + staging.string(), error);
  }
  throw Error(ErrorKind::io, "--save " + target.string() + ": no free staging directory name");
}

}  // namespace

void check_save_target(const fs::path& dir) {
  const fs::path target = normalized(dir);
  std::error_code error;
  const auto status = fs::status(target, error);
  if (fs::exists(status) && !fs::is_directory(status))
    throw Error(ErrorKind::io, "--save " + target.string() + ": exists and is not a directory");
}

void save_files(const fs::path& dir, const NamedArrays& files) {
  const fs::path target = normalized(dir);
  check_save_target(target);
  std::error_code error;
  fs::create_directories(target.parent_path(), error);
  if (error) fail(target, "cannot create its parent directory", error);

  const fs::path staging = make_staging_dir(target);
  try {
    for (const auto& [name, array] : files) io::write_npy(staging / name, array);
  } catch (...) {
    fs::remove_all(staging, error);
    throw;
  }

  if (!fs::exists(target)) {
    fs::rename(staging, target, error);
    if (error) {
      fs::remove_all(staging, error);
      fail(target, "cannot move the staged files into place", error);
    }
    return;
  }
  // Renames within one directory tree do not fail for lack of space, so once staged the files
  // land whole.
  for (std::string_view name : kContractFiles) {
    const bool written = std::any_of(files.begin(), files.end(),
                                     [&](const auto& file) { return file.first == name; });
    if (!written) fs::remove(target / name, error);
  }
  for (const auto& file : files) {
    fs::rename(staging / file.first, target / file.first, error);
    if (error) fail(target, "cannot move " + file.first + " into place", error);
  }
  fs::remove_all(staging, error);
}

}  // namespace tilefmha::cli
