// Where tilefmha's data files (arch specs, sweep configs, profiles) live at run time.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

namespace tilefmha {

// $TILEFMHA_DATA_DIR when set and non-empty (binaries may run on another machine than the one
// that built them), else the source tree's data/ directory compiled in as TILEFMHA_DATA_DIR.
std::filesystem::path data_dir();

// Reads and parses a JSON file. A missing or unreadable file is Error(io); malformed JSON is
// Error(invalid_argument) naming the file and the parser's complaint.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace tilefmha
