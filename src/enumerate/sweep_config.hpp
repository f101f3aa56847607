// Sweep configs (data/configs/*.json): which kernels a sweep enumerates.
//   {"variant": "fwd", "description": "...",
//    "trait_config": {"dtype": {"values": ["bf16"]}, ...},
//    "tile_config": {"block_m": {"values": [128]}, ...}}
// Both sections are allow-lists; absent keys allow everything.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "enumerate/allow_list.hpp"
#include "tilefmha/types.hpp"

namespace tilefmha::enumerate {

// A variant names the families a sweep covers: a family name, or a group such as "splitkv"
// (split-KV and its combine) or "bwd" (the three backward families), or "all".
struct Variant {
  std::string_view name;
  std::vector<Family> families;
};
std::span<const Variant> variants();
// Throws Error(invalid_argument) listing the known variants.
std::vector<Family> variant_families(std::string_view variant);

struct SweepConfig {
  std::string name;    // file stem
  std::string source;  // file path
  std::string variant;
  std::string description;
  std::vector<Family> families;
  FieldAllowList allow;  // trait_config and tile_config together
};

SweepConfig parse_sweep_config(const nlohmann::json& json, const std::string& name,
                               const std::string& source);
// A bare name ("fwd") is data_dir()/configs/<name>.json; anything with a '/' or a .json suffix
// is a path.
SweepConfig load_sweep_config(std::string_view name_or_path);
// Stems of data_dir()/configs/*.json, sorted.
std::vector<std::string> sweep_config_names();

}  // namespace tilefmha::enumerate
