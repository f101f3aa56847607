// Where tilefmha's data files (arch specs, profiles, sweep configs, benchmark matrices) come
// from at run time, and the one way to read them. Every file of data/ is also embedded into the
// library at build time (cmake/EmbedData.cmake), so a library installed without the source tree
// still loads them.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tilefmha {

// The directory data_dir() names when the files come from the embedded copy. It is not a
// directory on disk: paths under it ("embedded:data/arch/sm90.json") are served from the
// library by read_file_contents, is_readable_file and json_file_stems.
inline constexpr std::string_view kEmbeddedDataDir = "embedded:data";

// In order of preference: $TILEFMHA_DATA_DIR when set and non-empty (binaries may run on another
// machine than the one that built them; no fallback then, so a file missing there is an error),
// else the source tree's data/ directory compiled in as TILEFMHA_DATA_DIR when it exists, else
// kEmbeddedDataDir. Callers build file paths under it (data_dir() / "arch" / "sm90.json").
std::filesystem::path data_dir();

// Whether data_dir() is kEmbeddedDataDir.
bool data_dir_is_embedded();

// Tests: `true` makes data_dir() return kEmbeddedDataDir whatever the environment and the source
// tree say; `false` restores the rule above.
void force_embedded_data(bool on);

// The contents of the file at `path`: the embedded copy for paths under kEmbeddedDataDir, else
// the file on disk. A missing or unreadable file is Error(io) naming the path.
std::string read_file_contents(const std::filesystem::path& path);

// Whether read_file_contents(path) finds a file (a regular file on disk, or an embedded one).
bool is_readable_file(const std::filesystem::path& path);

// Stems of the *.json files directly in `dir` (on disk or under kEmbeddedDataDir), sorted; none
// when it does not exist.
std::vector<std::string> json_file_stems(const std::filesystem::path& dir);

// Reads (read_file_contents) and parses a JSON file. A missing or unreadable file is Error(io);
// malformed JSON is Error(invalid_argument) naming the file and the parser's complaint.
nlohmann::json read_json_file(const std::filesystem::path& path);

// One embedded file of data/: its path relative to data/ ("arch/sm90.json") and its bytes.
struct EmbeddedDataFile {
  std::string_view path;
  std::string_view contents;
};

// Every *.json file of data/ at build time, sorted by path. Defined in the generated
// embedded_data_files.cpp.
std::span<const EmbeddedDataFile> embedded_data_files();

// The embedded file at `relative_path` (relative to data/), or nullptr.
const EmbeddedDataFile* find_embedded_data_file(std::string_view relative_path);

}  // namespace tilefmha
