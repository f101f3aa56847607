#include "enumerate/sweep_config.hpp"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "enumerate/data_dir.hpp"
#include "enumerate/strict_json.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::enumerate {
namespace {

std::vector<Family> all_families() {
  std::vector<Family> out;
  for (size_t i = 0; i < enum_count<Family>(); ++i) out.push_back(static_cast<Family>(i));
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

std::span<const Variant> variants() {
  static const std::vector<Variant> table = [] {
    std::vector<Variant> out = {
        {"splitkv", {Family::fwd_splitkv, Family::fwd_splitkv_combine}},
        {"pagedkv", {Family::fwd_pagedkv}},
        {"appendkv", {Family::fwd_appendkv}},
        {"bwd", {Family::bwd_dot_do_o, Family::bwd_dq_dk_dv, Family::bwd_convert_dq}},
        {"all", all_families()},
    };
    for (Family family : all_families()) out.push_back({to_string(family), {family}});
    return out;
  }();
  return table;
}

std::vector<Family> variant_families(std::string_view variant) {
  std::string known;
  for (const Variant& v : variants()) {
    if (v.name == variant) return v.families;
    known += (known.empty() ? "" : ", ") + std::string(v.name);
  }
  throw Error(ErrorKind::invalid_argument,
              "unknown variant '" + std::string(variant) + "' (known: " + known + ")");
}

SweepConfig parse_sweep_config(const nlohmann::json& json, const std::string& name,
                               const std::string& source) {
  const std::string context = "sweep config '" + source + "'";
  StrictObject in(json, context);
  SweepConfig config;
  config.name = name;
  config.source = source;
  config.variant = in.required_string("variant");
  try {
    config.families = variant_families(config.variant);
  } catch (const Error& e) {
    data_error(context, e.what());
  }
  config.description = in.optional_string("description");
  const FieldSet tiles = tile_fields();
  if (const nlohmann::json* traits = in.optional("trait_config"))
    config.allow.intersect(
        parse_allow_section(*traits, context + ": trait_config", ~tiles, "tile_config"));
  if (const nlohmann::json* tile = in.optional("tile_config"))
    config.allow.intersect(
        parse_allow_section(*tile, context + ": tile_config", tiles, "trait_config"));
  in.finish();
  return config;
}

SweepConfig load_sweep_config(std::string_view name_or_path) {
  const std::string text(name_or_path);
  const bool is_path = text.find('/') != std::string::npos || text.ends_with(".json");
  const std::filesystem::path dir = data_dir() / "configs";
  const std::filesystem::path path = is_path ? std::filesystem::path(text) : dir / (text + ".json");
  if (!is_readable_file(path)) {
    if (is_path) throw Error(ErrorKind::io, "sweep config file '" + text + "' not found");
    throw Error(ErrorKind::invalid_argument, "unknown sweep config '" + text + "' (known in " +
                                                 dir.string() + ": " +
                                                 joined(json_file_stems(dir)) + ")");
  }
  return parse_sweep_config(read_json_file(path), path.stem().string(), path.string());
}

std::vector<std::string> sweep_config_names() {
  return json_file_stems(data_dir() / "configs");
}

}  // namespace tilefmha::enumerate
