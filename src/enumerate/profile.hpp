// Named profiles (data/profiles/<name>.json) restrict the feature product to what a user of the
// library needs: full, ci, pytorch, flash, serving, training, fp8, fp32.
//   {"description": "...",
//    "allow": {"dtype": {"values": ["fp16", "bf16"]}, ...},
//    "where": ["c.dtype != 'fp8_e4m3' or c.pipeline == 'sm90_ws'", ...]}
// `allow` is an allow-list over any field; every `where` filter expression must hold.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "enumerate/allow_list.hpp"
#include "enumerate/filter.hpp"

namespace tilefmha::enumerate {

struct Profile {
  std::string name;
  std::string description;
  FieldAllowList allow;
  FilterSet where;
};

Profile parse_profile(const nlohmann::json& json, const std::string& name,
                      const std::string& source);
// data_dir()/profiles/<name>.json; an unknown name is Error(invalid_argument) listing the known.
Profile load_profile(std::string_view name);
std::vector<std::string> profile_names();

}  // namespace tilefmha::enumerate
