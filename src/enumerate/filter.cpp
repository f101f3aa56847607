#include "enumerate/filter.hpp"

#include <fstream>

#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {

void FilterSet::add(std::string_view expression) {
  filters_.push_back(Filter::compile(expression));
}

void FilterSet::add_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::io, "cannot open filter file '" + path.string() + "'");
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    try {
      add(line);
    } catch (const Error& e) {
      throw Error(e.kind(), path.string() + ":" + std::to_string(line_number) + ": " + e.what());
    }
  }
}

bool FilterSet::matches(const KernelConfig& config) const {
  for (const Filter& filter : filters_)
    if (!filter.matches(config)) return false;
  return true;
}

}  // namespace tilefmha::enumerate
