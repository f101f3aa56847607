#include "enumerate/list_report.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {
namespace {

void write_json(const std::filesystem::path& path, const std::vector<KernelConfig>& configs) {
  nlohmann::json array = nlohmann::json::array();
  for (const KernelConfig& config : configs) array.push_back(config);
  const std::filesystem::path partial = path.string() + ".partial";
  {
    std::ofstream file(partial);
    if (!file) throw Error(ErrorKind::io, "cannot write '" + path.string() + "'");
    file << array.dump(1) << '\n';
    if (!file) throw Error(ErrorKind::io, "cannot write '" + path.string() + "'");
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) throw Error(ErrorKind::io, "cannot write '" + path.string() + "': " + error.message());
}

std::string padded(std::string_view text, size_t width) {
  std::string out(text);
  if (out.size() < width) out.resize(width, ' ');
  return out;
}

}  // namespace

Enumeration run_list(const ListOptions& options, std::ostream& out) {
  if (options.count_only && options.list)
    throw Error(ErrorKind::invalid_argument, "--count-only and --list exclude each other");
  const SweepConfig config = load_sweep_config(options.config);
  const Profile profile = load_profile(options.profile);
  FilterSet extra;
  for (const std::string& expression : options.filters) extra.add(expression);
  for (const std::string& file : options.filter_files) extra.add_file(file);
  const ArchSpec arch = load_arch_spec(options.arch);

  const Enumeration result = enumerate_kernels(arch, config, profile, extra);
  if (!options.json_path.empty()) write_json(options.json_path, result.configs);

  if (options.count_only) {
    out << result.configs.size() << '\n';
    return result;
  }
  out << "sweep config " << config.name << " (variant " << config.variant << "), arch "
      << to_string(options.arch) << ", profile " << profile.name << '\n';
  if (options.list)
    for (const KernelConfig& c : result.configs) out << c.name() << '\n';
  for (Family family : config.families)
    out << "  " << padded(to_string(family), 22) << result.per_family[size_t(family)] << '\n';
  out << "  " << padded("total", 22) << result.configs.size() << '\n';
  char timing[64];
  std::snprintf(timing, sizeof timing, "%.1f ms", result.seconds * 1e3);
  out << "enumerated in " << timing << '\n';
  if (!options.json_path.empty()) out << "wrote " << options.json_path.string() << '\n';
  return result;
}

}  // namespace tilefmha::enumerate
