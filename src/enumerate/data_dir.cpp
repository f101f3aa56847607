#include "enumerate/data_dir.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "tilefmha/error.hpp"

namespace tilefmha {
namespace {

std::atomic<bool> embedded_forced{false};

// The path of `path` relative to kEmbeddedDataDir ("arch/sm90.json"; "" for the directory
// itself), or nullopt when it does not lie under it.
std::optional<std::string> embedded_relative(const std::filesystem::path& path) {
  const std::string text = path.lexically_normal().generic_string();
  if (!text.starts_with(kEmbeddedDataDir)) return std::nullopt;
  std::string_view rest = std::string_view(text).substr(kEmbeddedDataDir.size());
  if (rest.empty()) return std::string();
  if (rest.front() != '/') return std::nullopt;  // "embedded:database", not under it
  rest.remove_prefix(1);
  while (rest.ends_with('/')) rest.remove_suffix(1);
  return std::string(rest);
}

}  // namespace

std::filesystem::path data_dir() {
  if (embedded_forced.load(std::memory_order_relaxed)) return kEmbeddedDataDir;
  if (const char* overridden = std::getenv("TILEFMHA_DATA_DIR"); overridden && *overridden)
    return overridden;
  std::error_code ignored;
  if (std::filesystem::is_directory(TILEFMHA_DATA_DIR, ignored)) return TILEFMHA_DATA_DIR;
  return kEmbeddedDataDir;
}

bool data_dir_is_embedded() {
  return data_dir() == kEmbeddedDataDir;
}

void force_embedded_data(bool on) {
  embedded_forced.store(on, std::memory_order_relaxed);
}

const EmbeddedDataFile* find_embedded_data_file(std::string_view relative_path) {
  const auto files = embedded_data_files();
  const auto found = std::lower_bound(
      files.begin(), files.end(), relative_path,
      [](const EmbeddedDataFile& file, std::string_view wanted) { return file.path < wanted; });
  return found != files.end() && found->path == relative_path ? &*found : nullptr;
}

std::string read_file_contents(const std::filesystem::path& path) {
  if (const auto relative = embedded_relative(path)) {
    if (const EmbeddedDataFile* file = find_embedded_data_file(*relative))
      return std::string(file->contents);
    throw Error(ErrorKind::io, "cannot open '" + path.string() +
                                   "': no such file among the library's embedded data files");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, "cannot open '" + path.string() + "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw Error(ErrorKind::io, "cannot read '" + path.string() + "'");
  return std::move(contents).str();
}

bool is_readable_file(const std::filesystem::path& path) {
  if (const auto relative = embedded_relative(path))
    return find_embedded_data_file(*relative) != nullptr;
  std::error_code ignored;
  return std::filesystem::is_regular_file(path, ignored);
}

std::vector<std::string> json_file_stems(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  if (const auto relative = embedded_relative(dir)) {
    const std::string prefix = relative->empty() ? "" : *relative + "/";
    for (const EmbeddedDataFile& file : embedded_data_files()) {
      if (!file.path.starts_with(prefix)) continue;
      const std::filesystem::path name(file.path.substr(prefix.size()));
      if (!name.has_parent_path() && name.extension() == ".json")
        names.push_back(name.stem().string());
    }
  } else {
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ignored))
      if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string contents = read_file_contents(path);
  try {
    return nlohmann::json::parse(contents);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorKind::invalid_argument,
                "'" + path.string() + "' is not valid JSON: " + std::string(e.what()));
  }
}

}  // namespace tilefmha
