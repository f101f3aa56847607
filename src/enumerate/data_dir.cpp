#include "enumerate/data_dir.hpp"

#include <cstdlib>
#include <fstream>

#include "tilefmha/error.hpp"

namespace tilefmha {

std::filesystem::path data_dir() {
  if (const char* overridden = std::getenv("TILEFMHA_DATA_DIR"); overridden && *overridden)
    return overridden;
  return TILEFMHA_DATA_DIR;
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::io, "cannot open '" + path.string() + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorKind::invalid_argument,
                "'" + path.string() + "' is not valid JSON: " + std::string(e.what()));
  }
}

}  // namespace tilefmha
