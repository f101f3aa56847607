// --save: the directory a run writes, filled only once everything is computed and staged, so a
// failure leaves it as it was.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "io/npy.hpp"

namespace tilefmha::cli {

using NamedArrays = std::vector<std::pair<std::string, io::NpyArray>>;

// Fails (Error io, exit 2) before anything is computed when `dir` cannot become the save
// directory: it exists and is not a directory.
void check_save_target(const std::filesystem::path& dir);

// Writes every file into a fresh sibling staging directory, then moves them into `dir` (created
// when missing, by one rename). Contract files of `dir` that this run does not write are
// removed, so a later --load never mixes two runs; other files are left alone. Any failure
// while staging removes the staging directory and leaves `dir` untouched.
void save_files(const std::filesystem::path& dir, const NamedArrays& files);

}  // namespace tilefmha::cli
