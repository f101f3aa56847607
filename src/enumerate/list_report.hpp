// `tilefmha list`: enumerate a sweep config under a profile and report counts, names or JSON.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "enumerate/enumerator.hpp"

namespace tilefmha::enumerate {

struct ListOptions {
  std::string config;  // sweep config name or path
  Arch arch = Arch::sm90;
  std::string profile = "full";
  std::vector<std::string> filters;       // --filter, each must hold
  std::vector<std::string> filter_files;  // --filter-file
  bool count_only = false;                // print only the total
  bool list = false;                      // print canonical names
  std::filesystem::path json_path;        // write the configs as a JSON array when not empty
};

// Runs the enumeration and writes the report to `out`. Bad inputs throw
// Error(invalid_argument) (or Error(io) for unreadable files) before anything is written.
Enumeration run_list(const ListOptions& options, std::ostream& out);

}  // namespace tilefmha::enumerate
